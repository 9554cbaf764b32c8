"""The documentation is held to the code (issue 39).

- The README is a door: under 150 lines, what ssptk is first, the two set-up commands CI runs, no dated measurements.
- Every command the README and the docs show is parsed by ssptk's own parsers, its values checked as a run would
  check them: ``ssptk ...`` lines of ``bash`` blocks, ``%dtrain`` lines, calls of ``ssptk.run``/``compare``/
  ``predict``/``simulate`` in Python blocks, and ``python benchmarks/run.py`` lines.
- The executed notebooks on the site are copies of ``notebooks/`` with the same cells; the figures were made by
  ``docs/make_figures.py``; every ``SSPTK_`` variable is documented.
- The site builds with ``sphinx-build -W`` (every warning an error); every option of the one option table and every
  public name of the API is in it; Chromium opens its index and a notebook page and their figures load.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import ROOT, skip_or_fail

DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAIN_JOB = ("pip install . && ssptk compare sync ssp:4 async --model linear --workers 3 --steps 300 "
            "--jitter pause:0.05:0.03")
TESTS = "pip install '.[test]' && python -m pytest"
#: The Markdown the docs are made of: the README, CONTRIBUTING and every page under docs/ (the included lab log
#: and results are the benchmarks' own files, not pages written for the site).
PAGES = [README, ROOT / "CONTRIBUTING.md", *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.M | re.S)


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def blocks(path: Path, *languages: str) -> Iterator[tuple[str, int]]:
    """The fenced code blocks of ``path`` in these languages: (text, line of the fence)."""
    text = path.read_text()
    for m in FENCE.finditer(text):
        if m.group(1) in languages:
            yield m.group(2), text.count("\n", 0, m.start()) + 1


def shown_lines(prefix: str, *languages: str) -> list[tuple[str, str]]:
    """Every line of a code block in ``languages`` whose command starts with ``prefix``: (where, line)."""
    found = []
    for page in PAGES:
        for block, line in blocks(page, *languages):
            for k, text in enumerate(block.splitlines(), line + 1):
                text = re.sub(r"^\s*(\$\s+)?", "", text)
                text = re.sub(r"^pip install \.\s*&&\s*", "", text)  # the README's main job
                text = re.sub(r"^[A-Za-z_]\w*\s*=\s*(?=%)", "", text)  # res = %dtrain ...
                if text.startswith(prefix):
                    found.append((f"{page.relative_to(ROOT)}:{k}", text))
    return found


def inline_commands() -> list[tuple[str, str]]:
    """``ssptk ...`` commands quoted in the pages' prose, those written out whole: an option with its value at least
    (``ssptk sim --gap`` names an option), and no ``...``, ``<dir>`` or ``SPEC`` standing for a value."""
    found = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text())
        for m in re.finditer(r"(?<!`)`(ssptk (?:run|compare|sweep|report|sim|worker)\b[^`]*)`", text):
            tokens = m.group(1).split()
            fragment = tokens[1] == "worker" and "--cluster" not in tokens  # a flag of the worker, named
            if len(tokens) > 3 and not fragment and not any("..." in t or "<" in t or re.fullmatch(r"[A-Z][A-Z_]*", t)
                                                            for t in tokens):
                found.append((f"{page.relative_to(ROOT)} (prose)", m.group(1)))
    return found


# --- the README ------------------------------------------------------------------------------------------------------

def test_the_readme_is_a_door() -> None:
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: the rest belongs on the site (docs/)"
    first = next(ln for ln in lines[1:] if ln.strip())
    assert first.startswith("ssptk starts a real TensorFlow cluster"), first
    bash = [b.strip() for b, _ in blocks(README, "bash")]
    assert MAIN_JOB in bash and TESTS in bash, "each set-up command, word for word, in a ```bash block of its own"
    assert bash.index(MAIN_JOB) < bash.index(TESTS)
    dated = re.findall(r"\b20\d\d-\d\d-\d\d\b|\bstops? \d+\b", text)
    assert not dated, f"dated measurements or per-stop history in the README: {dated}"
    for heading in ("## What to look at", "## From Python", "## In Jupyter", "## Where to go next", "## Platforms"):
        assert heading in lines, heading


# --- every command shown is parsed -----------------------------------------------------------------------------------

@pytest.fixture
def placeholders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory where the docs' example paths exist: a step-time trace at runs/slurm-1234 and at a gathered
    Slurm job's runs/1234/gathered."""
    import ssptk.rundir  # noqa: F401  (a trace is read through it)

    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "slurm-1234").write_text("worker,seconds\n0,0.010\n1,0.012\n0,0.011\n1,0.030\n")
    (tmp_path / "runs" / "1234").mkdir()
    (tmp_path / "runs" / "1234" / "gathered").write_text("worker,seconds\n0,0.010\n1,0.012\n0,0.011\n1,0.030\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_ssptk_command_in_the_docs_is_one_the_parser_takes(placeholders: Path) -> None:
    from ssptk import commands
    from ssptk.core.errors import UsageError
    from ssptk.core.option_args import from_namespace
    from ssptk.runtime.task import parser as worker_parser

    shown = shown_lines("ssptk ", "bash")
    assert len(shown) >= 25 and any(where.startswith("README.md") for where, _ in shown), shown
    shown += inline_commands()
    parser = commands.build_parser()
    for p in (parser, *parser.commands.values()):
        p.raise_errors = True  # a mistake raises UsageError (with argparse's message), not SystemExit
    for where, line in shown:
        tokens = shlex.split(line.rstrip("&").strip(), comments=True)[1:]
        try:
            if tokens[0] == "worker":
                worker_parser().parse_args(tokens[1:])
                continue
            if "--help" in tokens:
                with pytest.raises(SystemExit) as help_exit:
                    parser.parse_args(tokens)
                assert help_exit.value.code == 0, (where, line)
                continue
            args = parser.parse_args(tokens)
            if args.command in ("compare", "sweep"):
                commands.compare_plan(args)  # every value checked, as before a comparison starts
            elif args.command == "sim":
                commands.sim_options(args)
            elif args.command == "run":
                from_namespace(args)
        except (UsageError, SystemExit) as e:
            pytest.fail(f"{where}: {line}\n  -> {e}")


def test_every_dtrain_line_in_the_docs_is_one_the_magic_takes() -> None:
    from ssptk import commands
    from ssptk.core.errors import UsageError
    from ssptk.core.option_args import from_namespace
    from ssptk.notebook.magics import parse_line

    shown = shown_lines("%dtrain", "python") + [(w, ln[1:]) for w, ln in shown_lines("%%dtrain", "python")]
    assert len(shown) >= 5, shown
    for where, line in shown:
        words = line.split("#")[0].split(None, 1)
        try:
            args = parse_line(words[1] if len(words) > 1 else "")
            assert args is not None, "only asked for help"
            if args.command in ("compare", "sweep"):
                commands.compare_plan(args)
            elif args.command == "run":
                from_namespace(args)
        except UsageError as e:
            pytest.fail(f"{where}: {line}\n  -> {e}")


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None  # a name or expression: its value is the example's, not checked here


def test_every_python_example_calls_ssptk_with_options_it_takes() -> None:
    import ssptk
    from ssptk.api import parse_labels
    from ssptk.core.options import OPTIONS, resolve

    options = {o.name for o in OPTIONS}
    calls = 0
    for page in PAGES:
        for block, line in blocks(page, "python"):
            code = "\n".join(ln for ln in block.splitlines() if not ln.lstrip().startswith(("%", "bg = %", "res = %")))
            if "%" in code.split("\n", 1)[0]:
                continue
            tree = ast.parse(code, filename=f"{page}:{line}")  # every Python example is Python
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "ssptk"
                        and node.func.attr in ("run", "compare", "predict", "simulate")):
                    continue
                calls += 1
                where = f"{page.relative_to(ROOT)}:{line + node.lineno}"
                fn = getattr(ssptk, node.func.attr)
                own = set(inspect.signature(fn).parameters)
                kwargs = {k.arg: _literal(k.value) for k in node.keywords if k.arg}
                unknown = set(kwargs) - options - own
                assert not unknown, f"{where}: ssptk.{node.func.attr}() takes no {sorted(unknown)}"
                run_kwargs = {k: v for k, v in kwargs.items() if k in options and v is not None}
                if node.func.attr in ("compare", "predict"):
                    labels = _literal(node.args[0]) if node.args else None
                    for _label, label_options in parse_labels(labels or ["sync"]):
                        resolve(**{**run_kwargs, **label_options})
                elif node.func.attr == "simulate" and node.args:
                    resolve(**{**run_kwargs, "mode": _literal(node.args[0])})
                else:
                    resolve(**run_kwargs)
    assert calls >= 5, calls


def test_every_benchmark_command_names_a_benchmark() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        bench = _load(ROOT / "benchmarks" / "run.py", "bench_run_for_docs")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    names = {bench.bench_name(fn) for fn in bench.BENCHMARKS}
    texts = [p.read_text() for p in PAGES]
    commands = [m.group(0) for t in texts for m in re.finditer(r"python benchmarks/run\.py[^`\n]*", t)]
    assert len(commands) >= 10, commands
    for command in commands:
        for name in re.findall(r"--only (\S+)", command):
            assert name in names, f"{command}: no benchmark {name!r} (there are {sorted(names)})"
        flags = set(re.findall(r"(--[a-z-]+)", command)) - {"--only", "--repeat", "--quick", "--no-write"}
        assert not flags, f"{command}: benchmarks/run.py takes no {flags}"


def test_the_user_model_example_is_a_model(tmp_path: Path) -> None:
    from ssptk import ModelSpec
    from ssptk.core.models import load_model

    (example, _), = [b for b in blocks(DOCS / "guides" / "user-models.md", "python") if "def make()" in b[0]]
    (tmp_path / "mymodel.py").write_text(example)
    spec = load_model(f"{tmp_path / 'mymodel.py'}:make")
    assert isinstance(spec, ModelSpec) and spec.lr == 0.1


# --- what the site shows that is not generated at build time ---------------------------------------------------------

def test_the_notebook_pages_are_the_notebooks_executed() -> None:
    sources = sorted((ROOT / "notebooks").glob("*.ipynb"))
    copies = sorted((DOCS / "notebooks").glob("*.ipynb"))
    assert [p.name for p in copies] == [p.name for p in sources], "python docs/run_notebooks.py: a copy per notebook"
    for source, copy in zip(sources, copies):
        nb, executed = nbformat.read(source, as_version=4), nbformat.read(copy, as_version=4)
        stale = f"docs/notebooks/{copy.name} is not notebooks/{source.name} executed: python docs/run_notebooks.py " \
                f"{source.stem}"
        assert [(c.cell_type, c.source) for c in executed.cells] == [(c.cell_type, c.source) for c in nb.cells], stale
        meta = executed.metadata.get("ssptk_docs", {})
        assert meta.get("source") == f"notebooks/{source.name}", stale
        code = [c for c in executed.cells if c.cell_type == "code"]
        assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), f"{stale} (not run in order)"
        outputs = [o for c in code for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error"], f"{copy.name}: an error in its outputs"
        assert any("image/png" in o.get("data", {}) or "data:image/png" in str(o.get("data", {}).get("text/html"))
                   for o in outputs), f"{copy.name}: no figure"


def test_the_figures_are_made_by_the_script_and_shown() -> None:
    from PIL import Image

    figures = _load(DOCS / "make_figures.py", "make_figures_for_docs")
    present = {p.name for p in (DOCS / "figures").glob("*")}
    assert present == set(figures.FIGURES), "docs/figures/ holds exactly what python docs/make_figures.py makes"
    pages = "".join(p.read_text() for p in PAGES)
    for name, scenario in figures.FIGURES.items():
        with Image.open(DOCS / "figures" / name) as image:
            source = image.text.get("Source", "")
        assert source.startswith(f"docs/make_figures.py {scenario} "), f"{name}: made by {source or 'hand'}"
        assert f"figures/{name}" in pages, f"{name} is on no page"


def test_every_ssptk_variable_is_documented() -> None:
    used = {m for p in (ROOT / "ssptk").rglob("*.py") for m in re.findall(r"\bSSPTK_[A-Z0-9_]+", p.read_text())}
    page = (DOCS / "reference" / "environment.md").read_text()
    assert used and not {v for v in used if f"`{v}" not in page}, sorted(v for v in used if f"`{v}" not in page)


# --- the site ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as ``python docs/build.py`` builds it: strictly."""
    if importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_nb") is None:
        skip_or_fail("the docs need pip install '.[docs]' (Sphinx, Furo, MyST-NB)")
    out = tmp_path_factory.mktemp("site")
    p = subprocess.run([sys.executable, str(DOCS / "build.py"), str(out)], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, f"sphinx-build -W failed:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return out


@pytest.mark.slow
def test_every_option_is_on_the_site(site: Path) -> None:
    from ssptk.core.options import OPTIONS

    html = (site / "reference" / "options.html").read_text()
    for o in OPTIONS:
        flag = o.name.replace("_", "-")
        assert f'id="cmdoption-ssptk-run-{flag}"' in html, f"--{flag} is not on the options page"
    extension = _load(DOCS / "_ext" / "ssptk_docs.py", "ssptk_docs_for_tests")
    for program, parser in extension.parsers().items():
        for action in parser._actions:
            for flag in action.option_strings if action.dest != "help" else ():
                assert f'<span class="pre">{flag}</span>' in html, f"{program} {flag} is not on the options page"


@pytest.mark.slow
def test_every_public_name_is_on_the_site(site: Path) -> None:
    import ssptk
    import ssptk.api

    html = (site / "reference" / "api.html").read_text()
    names = {f"ssptk.{n}" for n in ssptk.__all__} | {f"ssptk.api.{n}" for n in ssptk.api.__all__}
    missing = sorted(n for n in names if f'id="{n}"' not in html
                     and f'id="{n.replace("ssptk.api.", "ssptk.")}"' not in html)
    assert not missing, f"not in the API reference: {missing}"


@pytest.mark.slow
@pytest.mark.browser
def test_the_site_shows_its_figures_in_chromium(site: Path) -> None:
    from test_browser import CHROMIUM, CHROMIUM_ARGS, _require_browser

    sync_playwright = _require_browser()
    pages = {"index.html": 1, "notebooks/sync_ssp_async.html": 3, "concepts/tradeoff.html": 2}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            for name, least in pages.items():
                page.goto((site / name).as_uri())
                page.wait_for_load_state("load")
                images = page.eval_on_selector_all(
                    "article img", "imgs => imgs.map(i => [i.currentSrc, i.complete, i.naturalWidth])")
                broken = [src for src, complete, width in images if not complete or width == 0]
                assert not broken, f"{name}: images that did not load: {broken}"
                assert len(images) >= least, f"{name}: {len(images)} figures, expected at least {least}"
        finally:
            browser.close()
