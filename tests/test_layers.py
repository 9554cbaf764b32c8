"""The package layout stays true: imports read with ``ast`` follow the layer order of CONTRIBUTING.md, form
no cycle, and never reach for another module's private names; one name means one thing. Every import counts, also
those inside functions (a late import is still a dependency)."""
from __future__ import annotations

import ast
import re
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
    "commands": {"core", "rundir", "sim", "render", "experiment", "api"},
    "cli": {"core", "render", "commands", "worker"},
    "notebook": {"core", "rundir", "analysis", "render", "experiment", "api", "commands"},
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


#: The size limits CONTRIBUTING.md states (test_contributing_states_these_limits keeps the two the same).
MAX_MODULE_LINES = 420
MAX_FUNCTION_LINES = 70


def size_problems(module: str) -> list[str]:
    """What is wrong with ``module``'s docstring and size, one line each."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    found = [] if ast.get_docstring(tree) else [f"{module} has no module docstring"]
    lines = len(path.read_text().splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{module} has {lines} lines (at most {MAX_MODULE_LINES}): split it by what it holds")
    found += [f"{module}: {n.name} has {n.end_lineno - n.lineno + 1} lines (at most {MAX_FUNCTION_LINES})"  # type: ignore[operator]
              for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
              and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]  # type: ignore[operator]
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_small_modules_with_a_docstring(module: str) -> None:
    problems = size_problems(module)
    assert not problems, "\n".join(problems)


def package_problems(root: Path) -> list[str]:
    """Folders of ``root`` that hold modules without being a package with a docstring."""
    found = []
    for folder in sorted({p.parent for p in root.rglob("*.py")}):
        init = folder / "__init__.py"
        if not init.exists():
            found.append(f"{folder.relative_to(root.parent)} has no __init__.py (a namespace package hides its role)")
        elif not ast.get_docstring(ast.parse(init.read_text())):
            found.append(f"{init.relative_to(root.parent)} has no docstring saying what the package holds")
    return found


def test_every_package_says_what_it_holds() -> None:
    problems = package_problems(PACKAGE)
    assert not problems, "\n".join(problems)


def test_contributing_states_these_limits() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    assert f"{MAX_MODULE_LINES} lines" in text and f"{MAX_FUNCTION_LINES} lines" in text
    missing = [name for name in LAYERS if name != "ssptk" and f"`{name}" not in text]
    assert not missing, f"CONTRIBUTING.md's layer table has no row for {missing}"


def plant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: dict[str, str],
          doc: str = '"""doc"""') -> None:
    """Make the checks read only the modules ``planted`` (dotted name -> source after the docstring ``doc``), written
    under ``tmp_path``: a name of a package (``ssptk.render``) is its ``__init__.py``."""
    modules = {}
    for name, text in planted.items():
        parts = name.split(".")
        path = (tmp_path.joinpath(*parts) / "__init__.py" if len(parts) == 2
                else tmp_path.joinpath(*parts).with_suffix(".py"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{doc}\n{text}")
        modules[name] = path
    monkeypatch.setattr(__import__(__name__), "MODULES", modules)


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


def test_the_size_and_package_checks_see_violations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted module without a docstring, one too long, a function too long and a folder that is no package."""
    pkg = tmp_path / "ssptk"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""doc"""\n')
    (pkg / "core" / "__init__.py").write_text("x = 1\n")
    (pkg / "loose").mkdir()
    (pkg / "loose" / "m.py").write_text('"""doc"""\n')
    (pkg / "core" / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    body = "".join(f"    y = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (pkg / "core" / "long.py").write_text(f'"""doc"""\ndef f():\n{body}')
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "MODULES", {module_name(p): p for p in pkg.rglob("*.py")})
    assert size_problems("ssptk.core.big")[0] == "ssptk.core.big has no module docstring"
    assert "has 421 lines (at most 420)" in size_problems("ssptk.core.big")[1]
    assert size_problems("ssptk.core.long") == ["ssptk.core.long: f has 71 lines (at most 70)"]
    assert package_problems(pkg) == ["ssptk/core/__init__.py has no docstring saying what the package holds",
                                     "ssptk/loose has no __init__.py (a namespace package hides its role)"]


#: Public top-level names more than one module may define: IPython looks for a notebook extension's hooks by these
#: names in the package it loads (``%load_ext ssptk``), so ``ssptk/__init__.py`` defines them as thin wrappers of
#: ``ssptk/notebook/magics.py``'s (which import IPython only when called). A re-export (``from m import name``) is not
#: a definition and needs no entry here.
SHARED_NAMES = frozenset({"load_ipython_extension", "unload_ipython_extension"})


def top_level_names(tree: ast.Module) -> Iterator[str]:
    """The public names a module defines at its top level (also under a top-level ``if``, ``try`` or ``with``):
    functions, classes and assigned names; imports are not definitions."""
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        else:
            names = []
            if isinstance(node, (ast.If, ast.Try, ast.With)):
                todo += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                         *(s for h in getattr(node, "handlers", []) for s in h.body)]
        yield from (n for n in names if not n.startswith("_"))


def name_problems() -> list[str]:
    """One name, one thing: a file name two modules share (``__init__.py`` aside: ``ssptk/widgets.py``, the documented
    ``ssptk.widgets``, is the only one of its name), and a public top-level name two modules define."""
    by_file: dict[str, list[str]] = {}
    by_name: dict[str, list[str]] = {}
    for m, path in sorted(MODULES.items()):
        if path.name != "__init__.py":
            by_file.setdefault(path.name, []).append(m)
        for name in sorted(set(top_level_names(ast.parse(path.read_text()))) - SHARED_NAMES):
            by_name.setdefault(name, []).append(m)
    return ([f"{', '.join(ms)} share the file name {f}: name each for what it holds in its layer"
             for f, ms in sorted(by_file.items()) if len(ms) > 1]
            + [f"{name} is defined in {', '.join(ms)}: one owner that the others import, or a name for each thing"
               for name, ms in sorted(by_name.items()) if len(ms) > 1])


def test_one_name_one_thing() -> None:
    problems = name_problems()
    assert not problems, "\n".join(problems)


def test_the_name_check_sees_violations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted file name in two layers and a public name defined twice (once under an ``if``) are found; a private
    name, a re-export, the IPython hooks and two ``__init__.py`` are not."""
    planted = {"ssptk.render.numbers": "class Outcome:\n    pass\n_cache = {}\ndef load_ipython_extension(ip):\n    pass\n",
               "ssptk.analysis.numbers": "if True:\n    Outcome = tuple\n_cache = {}\n",
               "ssptk.analysis.table": "from ssptk.analysis.numbers import Outcome\nLIMIT: int = 4\n",
               "ssptk.notebook.magics": "def load_ipython_extension(ip):\n    pass\nLIMIT = 5\n",
               "ssptk.render": "", "ssptk.analysis": ""}
    plant(tmp_path, monkeypatch, planted)
    assert name_problems() == [
        "ssptk.analysis.numbers, ssptk.render.numbers share the file name numbers.py: name each for what it holds in "
        "its layer",
        "LIMIT is defined in ssptk.analysis.table, ssptk.notebook.magics: one owner that the others import, or a name "
        "for each thing",
        "Outcome is defined in ssptk.analysis.numbers, ssptk.render.numbers: one owner that the others import, or a "
        "name for each thing"]


#: A string that names a file of a run or comparison directory (``summary.json``, ``{label}/metrics.csv``,
#: ``rep-2``): only ``ssptk/rundir/`` builds those (``RunDir``, ``ComparisonDir``). Messages and help text have
#: spaces, so they do not match; docstrings are left out.
RUN_FILE = re.compile(r"^[\w.\-/<>{}*]*\.(json|jsonl|csv|html)$|^/?rep-")
#: Its one owner, and how many step-record field names a literal may list elsewhere (a plot's few columns).
RECORD_OWNER, MAX_RECORD_FIELDS = "ssptk.core.records", 4


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(n.body[0].value) for n in ast.walk(tree)  # type: ignore[attr-defined]
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def format_problems() -> list[str]:
    """Run-directory file names outside ``rundir/``, and step-record field lists outside their owner."""
    from ssptk.core.records import STEP_COLUMNS

    found = []
    for m, path in sorted(MODULES.items()):
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        if layer(m) != "rundir":
            found += [f"{m}:{n.lineno} names the run-directory file {n.value!r}: take its path from RunDir or "
                      "ComparisonDir" for n in ast.walk(tree) if isinstance(n, ast.Constant)
                      and isinstance(n.value, str) and id(n) not in docs and RUN_FILE.match(n.value)]
        if m == RECORD_OWNER:
            continue
        for n in ast.walk(tree):
            items = n.keys if isinstance(n, ast.Dict) else n.elts if isinstance(n, (ast.Tuple, ast.List, ast.Set)) else []
            named = [e.value for e in items if isinstance(e, ast.Constant) and e.value in STEP_COLUMNS]
            if len(named) > MAX_RECORD_FIELDS:
                found.append(f"{m}:{n.lineno} lists the step record's fields {named}: use {RECORD_OWNER}")
    return found


def test_each_format_has_one_owner() -> None:
    problems = format_problems()
    assert not problems, "\n".join(problems)


def test_the_format_check_sees_violations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = {"ssptk.render.a": 'import os\np = os.path.join("x", "summary.json")\nq = f"{p}/rep-{1}"\n',
               "ssptk.analysis.b": 'COLS = ("t", "worker", "step", "global_step", "loss")\n',
               "ssptk.rundir.c": 'NAME = "summary.json"\n'}
    plant(tmp_path, monkeypatch, planted, doc='"""Writes summary.json."""')
    assert format_problems() == [
        "ssptk.analysis.b:2 lists the step record's fields ['t', 'worker', 'step', 'global_step', 'loss']: "
        "use ssptk.core.records",
        "ssptk.render.a:3 names the run-directory file 'summary.json': take its path from RunDir or ComparisonDir",
        "ssptk.render.a:4 names the run-directory file '/rep-': take its path from RunDir or ComparisonDir"]


#: What a summary.json or config.json (or a section of one) is called where the code holds it: a variable, attribute
#: or method named so (``summary``, ``r.summary``, ``rd.config()``, ``stored``, ``rd.final()``, ``rd.traffic()``).
CONTRACT_NAMES = re.compile(r"^(summary|summaries|config|cfg|stored|final|traffic)$")


def contract_keys() -> set[str]:
    """The keys of summary.json, config.json, model/final.json and traffic.json, their sections included, as their
    typed owners declare them."""
    from ssptk.rundir import (
        FinalModel,
        LinkTraffic,
        Predicted,
        RunConfig,
        StoredOptions,
        Summary,
        TaskBytes,
        TaskInfo,
        TrafficSection,
    )

    return {k for view in (Summary, TrafficSection, Predicted, RunConfig, TaskInfo, StoredOptions, FinalModel,
                           LinkTraffic, TaskBytes) for k in view.KEYS}


def _names(node: ast.expr) -> Iterator[str]:
    """The names along an expression's chain: ``r.summary().traffic`` -> ``traffic``, ``summary``, ``r``."""
    while True:
        if isinstance(node, ast.Name):
            yield node.id
            return
        if isinstance(node, ast.Attribute):
            yield node.attr
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return


def _key_read(n: ast.AST) -> tuple[str, ast.expr] | None:
    """``(key, receiver)`` of ``receiver["key"]`` (read, not written) or ``receiver.get("key", ...)``."""
    if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and isinstance(n.slice, ast.Constant) \
            and isinstance(n.slice.value, str):
        return n.slice.value, n.value
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("get", "pop") and n.args \
            and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
        return n.args[0].value, n.func.value
    return None


#: Keys of the contract files that other structures have too, so that only a read through a name of
#: :data:`CONTRACT_NAMES` is taken for a read of the files: a cluster spec's ``cluster``; a divergence check's
#: ``diverged_at_step``; model/final.json's ``params``; a comparison table's attrs (``target``, ``target_on``,
#: ``predicted``, ``traffic_not_measured``); traffic.json's and the links' counters (``tasks``, ``rates``); a
#: predicted run's job (``run_dir``); an event record's ``signal``; the keyword options of a run (``warm``); a held-out
#: evaluation's record, and its curve's columns (``eval_loss``, ``eval_accuracy``: model/final.json's too).
#: Every other key of theirs that is not a table column, a step record's field or an option is theirs alone, and
#: read by key nowhere outside ``rundir/``, whatever the name it is read through.
SHARED_KEYS = frozenset({"cluster", "diverged_at_step", "params", "target", "target_on", "predicted",
                         "traffic_not_measured", "tasks", "rates", "run_dir", "signal", "warm", "eval_loss",
                         "eval_accuracy"})


def contract_only_keys() -> set[str]:
    """The keys only summary.json and config.json have (see :data:`SHARED_KEYS`)."""
    from ssptk.analysis import COMPARE_COLUMNS
    from ssptk.core.options import OPTIONS
    from ssptk.core.records import OPTIONAL_STEP_COLUMNS, STEP_COLUMNS

    elsewhere = {*COMPARE_COLUMNS, *STEP_COLUMNS, *OPTIONAL_STEP_COLUMNS, *(o.name for o in OPTIONS), *SHARED_KEYS}
    return contract_keys() - elsewhere


def contract_read_problems() -> list[str]:
    """String-key reads of summary.json's and config.json's keys outside ``rundir/``, through a name of
    :data:`CONTRACT_NAMES` or of a key only they have: their typed owners (``ssptk.rundir.Summary``,
    ``RunConfig``) have each key as an attribute."""
    keys, only = contract_keys(), contract_only_keys()
    found = []
    for m, path in sorted(MODULES.items()):
        if layer(m) == "rundir":
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            read = _key_read(n)
            if read is not None and (read[0] in only or read[0] in keys
                                     and any(CONTRACT_NAMES.match(x) for x in _names(read[1]))):
                found.append(f"{m}:{n.lineno} reads {ast.unparse(read[1])}[{read[0]!r}] by key: use the attribute "
                             f"of ssptk.rundir.Summary / RunConfig / FinalModel / LinkTraffic")
    return found


def test_contract_files_are_read_through_their_owners() -> None:
    problems = contract_read_problems()
    assert not problems, "\n".join(problems)


def test_the_contract_read_check_sees_violations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted read by key of a summary's, a config's, a final model's or a traffic file's key is found outside rundir/, through any chain that names
    the file; a key that is not the files', a write, and the same reads inside rundir/ are not."""
    planted = {"ssptk.render.a": 'x = r.summary["steps_per_s"]\ny = rd.config().get("tasks")\n'
                                 'z = summary.traffic.get("split")\nsummary["target"] = 1.0\n'
                                 'w = summary["not_a_key"]\nv = row["steps_per_s"]\nu = s.get("overhead_ms")\n'
                                 't = table.attrs["target"]\nq = rd.final()["eval_loss"]\n'
                                 'o = rd.traffic().get("network")\nk = counts["sent"]\n',
               "ssptk.rundir.b": 'x = r.summary["steps_per_s"]\ny = s.get("overhead_ms")\n'}
    plant(tmp_path, monkeypatch, planted)
    assert [p.split(" by key")[0] for p in contract_read_problems()] == [
        "ssptk.render.a:2 reads r.summary['steps_per_s']", "ssptk.render.a:3 reads rd.config()['tasks']",
        "ssptk.render.a:4 reads summary.traffic['split']", "ssptk.render.a:8 reads s['overhead_ms']",
        "ssptk.render.a:10 reads rd.final()['eval_loss']", "ssptk.render.a:11 reads rd.traffic()['network']",
        "ssptk.render.a:12 reads counts['sent']"]


#: Rules with one owner each: a line matching the pattern may only be in the owner modules.
RULE_OWNERS: list[tuple[str, str, tuple[str, ...]]] = [
    (r"def parse_label\b|^MODES\s*=", "the label grammar", ("ssptk.core.labels",)),
    (r"partition\(['\"]: ['\"]\)", "error text rewritten by hand (raise an error carrying the reason)", ()),
    (r"subprocess\.Popen\(", "starting processes", ("ssptk.launch.process", "ssptk.launch.netns")),
    (r"import matplotlib\.pyplot|from matplotlib import pyplot", "pyplot (global state)", ()),
    (r"\.axhline\(", "bound and target lines", ("ssptk.render.style",)),
    (r"json\.dumps\([^)]*separators", "the JSONL line format", ("ssptk.core.records",)),
    (r"^MAX_(JSON|LOG|LINE)_BYTES\s*=|^MAX_WORKERS\s*=", "the bounds on what is read from a run directory",
     ("ssptk.rundir.contract",)),
    (r"^MAX_DELAY_S\s*=", "the longest injected delay", ("ssptk.core.delays",)),
    (r"^(LINKS_ENV|MAX_TASKS)\s*=|def link_address\b", "the link addressing rule", ("ssptk.core.network",)),
    (r"\bhtb\b.*classid|tc\s+-batch", "traffic control", ("ssptk.launch.links",)),
    (r"^GLOBAL_STEP_BYTES\s*=|def shard_bytes\b|class ShardBalancer\b|min\(range\(.*\.__getitem__",
     "the PS-shard placement (engine and simulator alike)", ("ssptk.core.shards",)),
    (r"def machine_cores\b|\bsched_getaffinity\(", "the machine's cores", ("ssptk.core.resources",)),
    (r"def recorded_cores\b", "the cores config.json recorded", ("ssptk.rundir.layout",)),
    (r"[\"']loss became ", "the message of a non-finite loss", ("ssptk.core.errors",)),
]


def rule_problems() -> list[str]:
    found = []
    for m, path in sorted(MODULES.items()):
        for i, text in enumerate(path.read_text().splitlines(), 1):
            found += [f"{m}:{i} holds {what}, owned by {', '.join(owners) or 'nobody'}"
                      for pattern, what, owners in RULE_OWNERS if m not in owners and re.search(pattern, text)]
    return found


def test_each_rule_has_one_owner() -> None:
    problems = rule_problems()
    assert not problems, "\n".join(problems)


def test_the_rule_check_sees_violations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.py"
    path.write_text('"""doc"""\nimport subprocess\nsubprocess.Popen(["x"])\nreason = str(e).partition(": ")[2]\n')
    monkeypatch.setattr(__import__(__name__), "MODULES", {"ssptk.render.m": path})
    assert rule_problems() == [
        "ssptk.render.m:3 holds starting processes, owned by ssptk.launch.process, ssptk.launch.netns",
        "ssptk.render.m:4 holds error text rewritten by hand (raise an error carrying the reason), owned by nobody"]


def test_each_rule_owner_is_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second shard placement, core count, reader of the recorded cores or loss message is found, in any layer."""
    path = tmp_path / "m.py"
    path.write_text('"""doc"""\nimport os\n'
                    "def shard_bytes(sizes, shards):\n    return min(range(shards), key=load.__getitem__)\n"
                    "cores = len(os.sched_getaffinity(0))\n"
                    "def recorded_cores(config):\n    return None\n"
                    'stopped = f"loss became nan at step {step}"\n')
    monkeypatch.setattr(__import__(__name__), "MODULES", {"ssptk.sim.m": path})
    assert rule_problems() == [
        "ssptk.sim.m:3 holds the PS-shard placement (engine and simulator alike), owned by ssptk.core.shards",
        "ssptk.sim.m:4 holds the PS-shard placement (engine and simulator alike), owned by ssptk.core.shards",
        "ssptk.sim.m:5 holds the machine's cores, owned by ssptk.core.resources",
        "ssptk.sim.m:6 holds the cores config.json recorded, owned by ssptk.rundir.layout",
        "ssptk.sim.m:8 holds the message of a non-finite loss, owned by ssptk.core.errors"]


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


def test_a_command_that_prints_text_does_not_import_matplotlib() -> None:
    """``ssptk run``'s imports (the CLI, the API, a run, its summary and progress bar) leave matplotlib out: a CLI
    command paid 1.5 of its 4 CPU-seconds importing it. ``ssptk.render``'s names load from their modules when asked
    for, and each is where the package says it is."""
    import subprocess
    import sys

    code = ("import sys, ssptk.cli, ssptk.api, ssptk.experiment.single; "
            "from ssptk.render import ProgressBar, format_summary; print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    import ssptk.render as render

    assert sorted(render._HOMES) == sorted(render.__all__)
    assert all(getattr(render, name) is not None for name in render.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        render.nothing
