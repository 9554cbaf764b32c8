"""The package layout stays true: imports read with ``ast`` follow the layer order of CONTRIBUTING.md, form
no cycle, and never reach for another module's private names. Every import counts, also those inside
functions (a late import is still a dependency)."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ssptk"

#: Each layer (a sub-package, or a top-level module) and the layers it may import besides itself, lowest
#: first. The same table is drawn in CONTRIBUTING.md.
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "rundir": {"core"},
    "sim": {"core"},
    "analysis": {"core", "rundir", "sim"},
    "render": {"core", "rundir", "analysis"},
    "runtime": {"core", "rundir", "sim"},
    "launch": {"core", "rundir", "runtime"},
    "experiment": {"core", "rundir", "sim", "analysis", "render", "launch"},
    # front ends
    "api": {"core", "launch", "experiment"},
    "worker": {"runtime"},
    "cli": {"core", "rundir", "sim", "render", "experiment", "api", "worker"},
    "notebook": {"core", "rundir", "analysis", "render", "experiment", "api", "cli"},
    "widgets": {"notebook"},
    "ssptk": {"core", "sim", "api", "notebook"},  # ssptk/__init__.py
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "ssptk"


def imports(module: str) -> Iterator[tuple[str, str | None, int]]:
    """``(imported module, name taken from it or None, line)`` for every ssptk import in ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ssptk":
                    yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "ssptk":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub, None, node.lineno) if sub in MODULES else (target, alias.name, node.lineno)


def edges() -> dict[str, set[str]]:
    return {m: {target for target, _, _ in imports(m) if target in MODULES and target != m} for m in MODULES}


def test_every_module_is_in_a_layer() -> None:
    assert len(MODULES) > 40
    assert {layer(m) for m in MODULES} <= set(LAYERS), sorted({layer(m) for m in MODULES} - set(LAYERS))


def test_imports_follow_the_layer_order() -> None:
    wrong = [f"{m}:{line} imports {target} ({layer(m)} may import {sorted(LAYERS[layer(m)]) or 'nothing'})"
             for m in sorted(MODULES) for target, _, line in imports(m)
             if target in MODULES and layer(target) != layer(m) and layer(target) not in LAYERS[layer(m)]]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    graph = edges()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_no_private_names_across_modules() -> None:
    found = [f"{m}:{line} imports {name} from {target}" for m in sorted(MODULES)
             for target, name, line in imports(m)
             if name is not None and name.startswith("_") and not name.startswith("__")]
    for m, path in MODULES.items():  # module._name through an imported module
        tree = ast.parse(path.read_text())
        aliases = {(a.asname or a.name.rpartition(".")[2]) for node in ast.walk(tree)
                   if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names
                   if (isinstance(node, ast.Import) and a.name.startswith("ssptk"))
                   or (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ssptk")
                       and f"{node.module}.{a.name}" in MODULES)}
        found += [f"{m}:{n.lineno} uses {n.value.id}.{n.attr}" for n in ast.walk(tree)
                  if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
                  and n.attr.startswith("_") and not n.attr.startswith("__")]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_small_modules_with_a_docstring(module: str) -> None:
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    assert ast.get_docstring(tree), f"{module} has no module docstring"
    lines = len(path.read_text().splitlines())
    assert lines <= 420, f"{module} has {lines} lines: split it by what it holds"
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines)" for n in ast.walk(tree)  # type: ignore[operator]
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 85]  # type: ignore[operator]
    assert not long, f"{module}: functions over ~80 lines: {', '.join(long)}"


def test_the_checker_sees_violations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks above can fail: a planted upward import, cycle and private import are found."""
    fake = {"ssptk.core.a": "from ssptk.render.b import _x\n", "ssptk.render.b": "import ssptk.core.a\n"}
    for name, text in fake.items():
        p = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f'"""doc"""\n{text}')
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    modules = {module_name(tmp_path.joinpath(*n.split(".")).with_suffix(".py")): tmp_path.joinpath(*n.split(".")).with_suffix(".py")
               for n in fake}
    monkeypatch.setattr(__import__(__name__), "MODULES", modules)
    with pytest.raises(AssertionError, match="ssptk.core.a:2 imports ssptk.render.b"):
        test_imports_follow_the_layer_order()
    with pytest.raises(AssertionError, match="ssptk.core.a -> ssptk.render.b -> ssptk.core.a"):
        test_no_import_cycles()
    with pytest.raises(AssertionError, match="imports _x from ssptk.render.b"):
        test_no_private_names_across_modules()


@pytest.mark.parametrize("modules", ["ssptk", "ssptk.worker, ssptk.runtime.ps_loop, ssptk.runtime.allreduce"])
def test_light_imports(modules: str) -> None:
    """``import ssptk`` and what every task imports stay free of pandas, matplotlib and TensorFlow (each task is
    a process of its own: a heavy import is paid N+1 times per cluster)."""
    import subprocess
    import sys

    code = (f"import sys; import {modules}; "
            "print(sorted(m for m in ('pandas', 'matplotlib', 'tensorflow', 'IPython') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
