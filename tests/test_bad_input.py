"""One table of bad inputs, fed to all three surfaces: the CLI (a subprocess), the Python API
(``ssptk.run`` / ``ssptk.compare``) and ``%dtrain`` in a real Jupyter kernel.

For every row and surface: the message is one clear line (no Python traceback), no process is left
behind, and no run directory is overwritten or created where none should be. Each row runs in a
workspace holding an existing, non-empty run directory (a sentinel): the row whose mistake *is* a
non-empty ``--out`` points there and must leave it untouched; every other row points ``--out`` at a
fresh path, which a refused input must not create (bad input is refused before anything is created
or started). One row (a loss that becomes NaN) really starts a cluster and must end as a failed run.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from conftest import FIXTURES, assert_gone, cluster_processes, ssptk_cmd, warm_processes
from test_magics import _errors, _usage_error, run_cell

import ssptk
from ssptk.core.errors import RunFailed, UsageError

NAN = r"loss became nan at step \d+ \(worker \d+, global step \d+\): lower --lr, check the model, or pass --allow-nan"

@dataclass(frozen=True)
class Row:
    """One bad input, in the CLI/magic grammar (``args``) and as Python keyword arguments (``api``)."""

    id: str
    args: tuple[str, ...]           # after the command, without --out: the CLI's and %dtrain's tokens
    api: dict[str, Any]             # the same input for ssptk.run / ssptk.compare (compare: "labels" key)
    message: str                    # regex the one-line message must contain
    api_message: str | None = None  # where Python's words differ from argparse's
    command: str = "run"            # run | compare
    out: str = "fresh"              # fresh: must not be created | existing: the sentinel | run: a failed run
    argparse: bool = False          # refused by argparse in the CLI (its usage lines come first)
    kernel_extra: tuple[str, ...] = ()
    marks: tuple[Any, ...] = field(default=())

    @property
    def failed_run(self) -> bool:
        return self.out == "run"


ROWS = [
    # --- malformed options ---
    Row("unknown-mode", ("--mode", "bsp"), {"mode": "bsp"},
        r"unknown mode 'bsp': did you mean ssp\? \(choose one of sync, ssp, async, allreduce"),
    Row("negative-staleness", ("--mode", "ssp", "--staleness", "-1"), {"mode": "ssp", "staleness": -1},
        r"--staleness must be an integer >= 0, got -1"),
    Row("staleness-with-async", ("--mode", "async", "--staleness", "2"), {"mode": "async", "staleness": 2},
        r"--staleness applies to ssp only, not async"),
    Row("workers-0", ("--workers", "0"), {"workers": 0}, r"--workers must be >= 1, got 0"),
    Row("workers-not-a-number", ("--workers", "three"), {"workers": "three"},
        r"argument --workers: invalid int value: 'three'", api_message=r"--workers must be an integer, got 'three'",
        argparse=True),
    Row("bad-straggler", ("--straggler", "x"), {"straggler": ["x"]}, r"bad --straggler 'x': use I:SECONDS"),
    Row("straggler-out-of-range", ("--workers", "2", "--straggler", "2:0.1"), {"workers": 2, "straggler": ["2:0.1"]},
        r"--straggler index 2 is out of range: workers are 0\.\.1"),
    Row("bad-jitter", ("--jitter", "normal:1"), {"jitter": "normal:1"},
        r"bad --jitter 'normal:1': use exp:MEAN, uniform:LO:HI or pause:P:SECONDS"),
    Row("backup-with-ssp", ("--mode", "ssp", "--backup", "1"), {"mode": "ssp", "backup": 1},
        r"--backup applies to sync and local only, not ssp"),
    Row("unknown-option", ("--colour", "red"), {"colour": "red"}, r"unrecognized arguments: --colour red",
        api_message=r"unknown option 'colour': options are ", argparse=True),
    Row("bad-gpus", ("--gpus", "x"), {"gpus": "x"}, r"bad --gpus 'x': use auto, none, or GPU ids like 0,2"),
    Row("jitter-past-a-day", ("--jitter", "pause:1:1e308", "--stall-timeout", "0"),
        {"jitter": "pause:1:1e308", "stall_timeout": 0},
        r"bad --jitter 'pause:1:1e\+308': its delays run over a day \(86400 s\)"),  # crashed a worker (OverflowError)
    Row("stragglers-adding-up-to-inf", ("--workers", "2", "--straggler", "1:1e308", "--straggler", "1:1e308"),
        {"workers": 2, "straggler": ["1:1e308", "1:1e308"]},
        r"--straggler: worker 1 would be held inf s every step, more than a day \(86400 s\)"),
    Row("lr-nan", ("--lr", "nan"), {"lr": "nan"}, r"--lr must be a finite number > 0, got nan"),  # API: TypeError
    # --- inputs that are not files, networks the kernel or the mode cannot have (issue 36, points 3 and 6; 42) ---
    Row("jitter-trace-a-device", ("--jitter", "trace:/dev/zero"), {"jitter": "trace:/dev/zero"},
        r"--jitter trace:/dev/zero: a device, not a regular file; give a run directory or a CSV"),  # was read to OOM
    Row("network-key-twice", ("--network", "ps=10mbit,ps=20mbit"), {"network": "ps=10mbit,ps=20mbit"},
        r"bad --network 'ps=10mbit,ps=20mbit': ps= is given twice; give each once"),  # the last won, silently
    Row("network-rate-too-slow", ("--network", "ps=1bit"), {"network": "ps=1bit"},
        r"'1bit' is outside the rates the kernel's traffic control shapes as asked: give a rate from 1kbit to 10tbit"),
    Row("network-rate-too-fast", ("--network", "ps=99999999tbit"), {"network": "ps=99999999tbit"},
        r"give a rate from 1kbit to 10tbit"),  # the kernel refused it once the run had started
    Row("network-ps-for-allreduce", ("--mode", "allreduce", "--network", "ps=20mbit"),
        {"mode": "allreduce", "network": "ps=20mbit"},
        r"bad --network 'ps=20mbit': allreduce has no parameter server, so ps= shapes no link"),  # was accepted
    Row("network-over-254-tasks", ("--workers", "300", "--layout", "shared", "--network", "1gbit"),
        {"workers": 300, "layout": "shared", "network": "1gbit"},
        r"--network shapes at most 254 tasks' links, and this run has 301 \(300 workers, 1 PS\)"),  # failed running
    Row("stall-timeout-true", ("--stall-timeout", "True"), {"stall_timeout": True},
        r"argument --stall-timeout: invalid float value: 'True'",
        api_message=r"--stall-timeout must be a number of seconds, got True", argparse=True),  # API: 1 s
    Row("non-empty-out", ("--workers", "2", "--steps", "20"), {"workers": 2, "steps": 20},
        r"output directory \S+existing exists and is not empty: choose another --out", out="existing"),
    # --- malformed user models ---
    Row("unknown-builtin-model", ("--model", "resnet"), {"model": "resnet"}, r"unknown model 'resnet': use linear, keras"),
    Row("model-raises-at-import", ("--model", "usermodel_import_error:model"), {"model": "usermodel_import_error:model"},
        r"model 'usermodel_import_error:model': cannot import module 'usermodel_import_error' "
        r"\(RuntimeError: broken at import on purpose\)"),
    Row("model-function-raises", ("--model", "usermodels:raises"), {"model": "usermodels:raises"},
        r"model 'usermodels:raises': raises\(\) raised RuntimeError: broken on purpose"),
    Row("model-returns-wrong-type", ("--model", "usermodels:returns_wrong_type"),
        {"model": "usermodels:returns_wrong_type"},
        r"model 'usermodels:returns_wrong_type': returns_wrong_type\(\) returned dict, expected ssptk\.ModelSpec"),
    Row("model-module-missing", ("--model", "nosuch_model_module:model"), {"model": "nosuch_model_module:model"},
        r"model 'nosuch_model_module:model': cannot import module 'nosuch_model_module' \(ModuleNotFoundError"),
    Row("model-function-missing", ("--model", "usermodels:missing"), {"model": "usermodels:missing"},
        r"model 'usermodels:missing': module 'usermodels' has no function 'missing'"),
    Row("model-file-missing", ("--model", f"{FIXTURES}/nosuch.py:model"), {"model": f"{FIXTURES}/nosuch.py:model"},
        r"model '\S+/nosuch\.py:model': no file '\S+/nosuch\.py'"),
    Row("model-loss-becomes-nan", ("--model", "usermodels:nan_loss", "--mode", "async", "--workers", "2", "--steps", "20"),
        {"model": "usermodels:nan_loss", "mode": "async", "workers": 2, "steps": 20}, NAN, out="run",
        kernel_extra=("--cold", "--no-dashboard"), marks=(pytest.mark.slow,)),
    # --- the same mistakes in a comparison: every label is checked before the first run ---
    Row("compare-unknown-mode", ("sync", "bsp", "--workers", "2"), {"labels": ["sync", "bsp"], "workers": 2},
        r"unknown mode 'bsp'", command="compare"),
    Row("compare-staleness-on-async", ("sync", "async:3"), {"labels": ["sync", "async:3"]},
        r"bad comparison label 'async:3': only ssp \(ssp:S\) and local \(local:H\) take a number", command="compare"),
    Row("compare-backup-with-ssp", ("sync", "ssp:2", "--backup", "1"), {"labels": ["sync", "ssp:2"], "backup": 1},
        r"--backup applies to sync and local only, not ssp", command="compare"),
    Row("compare-non-empty-out", ("sync", "async", "--workers", "2", "--steps", "20"),
        {"labels": ["sync", "async"], "workers": 2, "steps": 20},
        r"output directory \S+existing exists and is not empty: choose another --out", command="compare", out="existing"),
    Row("compare-model-function-missing", ("sync", "async", "--model", "usermodels:missing"),
        {"labels": ["sync", "async"], "model": "usermodels:missing"},
        r"model 'usermodels:missing': module 'usermodels' has no function 'missing'", command="compare"),
    Row("compare-bad-gpus", ("sync", "async", "--gpus", "x"), {"labels": ["sync", "async"], "gpus": "x"},
        r"bad --gpus 'x': use auto, none, or GPU ids like 0,2", command="compare"),
    Row("compare-network-ps-for-allreduce", ("sync", "allreduce", "--network", "ps=20mbit"),
        {"labels": ["sync", "allreduce"], "network": "ps=20mbit"}, r"allreduce has no parameter server, so ps= shapes "
        r"no link: give worker=RATE \(or RATE\)", command="compare"),
]

assert len({r.id for r in ROWS}) == len(ROWS)


def params() -> list[Any]:
    return [pytest.param(r, id=r.id, marks=r.marks) for r in ROWS]


# The lines a failed run may print after its one-line reason: the failing task's log tail and where the logs are.
TAIL_LINE = re.compile(r"^(last lines of \S+'s log:|  .*|logs kept in \S+)$")


# --- the workspace: an existing run directory that nothing may touch ------------------------------

class Workspace:
    """``root/existing`` is someone's earlier run (a sentinel); ``root/new-run`` must not appear unless
    the row really runs; nothing else may appear in ``root`` (e.g. a default ``runs/`` directory)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.existing = root / "existing"
        (self.existing / "workers").mkdir(parents=True)
        (self.existing / "keep.txt").write_text("mine: do not overwrite\n")
        (self.existing / "workers" / "worker-0.jsonl").write_text('{"t": 1, "worker": 0, "step": 1}\n')
        self.before = self.snapshot()

    def out(self, row: Row) -> Path:
        return self.existing if row.out == "existing" else self.root / "new-run"

    def snapshot(self) -> dict[str, tuple[bytes, int]]:
        return {str(p.relative_to(self.existing)): (p.read_bytes(), p.stat().st_mtime_ns)
                for p in sorted(self.existing.rglob("*")) if p.is_file()}

    def check(self, row: Row) -> None:
        assert self.snapshot() == self.before, "the existing run directory was changed"
        created = sorted(p.name for p in self.root.iterdir())
        if row.failed_run:  # the failed run keeps its logs and a summary saying why
            assert created == ["existing", "new-run"], created
            summary = (self.root / "new-run" / "summary.json").read_text()
            assert '"status": "failed"' in summary and "loss became nan" in summary
            for log in (self.root / "new-run" / "logs").glob("*.log"):  # the tasks said it in one line too
                assert "Traceback" not in log.read_text(errors="replace"), log
        else:
            assert created == ["existing"], f"a refused input created {created}"


@pytest.fixture
def workspace(tmp_path: Path, user_model_path: str, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    ws = Workspace(tmp_path / "ws")
    monkeypatch.chdir(ws.root)  # a default runs/ directory would appear here
    return ws


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def ssptk_descendants(pid: int) -> list[psutil.Process]:
    """Live descendants of ``pid`` that run ssptk code (cluster tasks, the network-namespace helper), but for the
    process's fork server, which stays up for the next cluster (tests/test_fork_server.py checks its end)."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for p in kids:
        try:
            cmd = " ".join(p.cmdline())
            if "ssptk" in cmd and "--fork-server" not in cmd:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            pass
    return _alive(found)


def tasks_under(path: Path) -> list[psutil.Process]:
    """Live ``ssptk.worker`` processes whose working directory is under ``path`` (as test_notebooks'
    ``ssptk_tasks_under``, without importing that module: nbclient costs seconds to import)."""
    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        if "ssptk.worker" in " ".join(p.info["cmdline"] or []) and (p.info["cwd"] or "").startswith(str(path)):
            found.append(p)
    return _alive(found)


def wait_none(find: Callable[[], list[psutil.Process]], within: float) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# --- the CLI ---------------------------------------------------------------------------------------

def fixtures_pythonpath() -> str:
    return os.pathsep.join(p for p in (str(FIXTURES), os.environ.get("PYTHONPATH", "")) if p)


def run_cli(row: Row, ws: Workspace) -> subprocess.CompletedProcess[str]:
    argv = [*ssptk_cmd(), row.command, *row.args, "--out", str(ws.out(row))]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ws.root,
                          env=dict(os.environ, PYTHONPATH=fixtures_pythonpath()))


@pytest.fixture(scope="module")
def cli_refusals(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The CLI on this session's selected refused rows, four at a time, started at once: each is a fresh
    Python (a second of imports on a loaded machine), and none starts a cluster. Row id -> (workspace,
    future of the finished process)."""
    rows = [item.callspec.params["row"] for item in request.session.items
            if getattr(item, "module", None) is request.module and getattr(item, "originalname", None) == "test_cli"
            and not item.callspec.params["row"].failed_run]
    with ThreadPoolExecutor(max_workers=4) as pool:
        started = {}
        for row in rows:
            ws = Workspace(tmp_path_factory.mktemp(f"cli-{row.id}") / "ws")
            started[row.id] = (ws, pool.submit(run_cli, row, ws))
        yield started


@pytest.mark.parametrize("row", params())
def test_cli(row: Row, request: pytest.FixtureRequest) -> None:
    if row.failed_run:  # starts a cluster: on its own
        workspace: Workspace = request.getfixturevalue("workspace")
        p = run_cli(row, workspace)
    else:
        workspace, future = request.getfixturevalue("cli_refusals")[row.id]
        p = future.result()
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines, "no message"
    if row.failed_run:
        assert p.returncode == 1, p.stderr
        assert lines[0].startswith("ssptk: run failed: worker:") and re.search(row.message, lines[0]), lines[0]
        assert all(TAIL_LINE.match(ln) for ln in lines[1:]), p.stderr
    elif row.argparse:  # argparse's own convention: the usage, then one error line
        assert p.returncode == 2, p.stderr
        assert lines[0].startswith("usage: ssptk") and all(ln.startswith(" ") for ln in lines[1:-1]), p.stderr
        assert re.match(r"ssptk( \w+)?: error: ", lines[-1]) and re.search(row.message, lines[-1]), lines[-1]
    else:
        assert p.returncode == 2, p.stderr
        assert len(lines) == 1 and lines[0].startswith("ssptk: error: "), p.stderr
        assert re.search(row.message, lines[0]), lines[0]
        assert p.stdout == ""
    assert_gone(str(workspace.root), within=10)
    workspace.check(row)


# --- the Python API --------------------------------------------------------------------------------

def api_call(row: Row, out: Path) -> Callable[[], Any]:
    kw = dict(row.api)
    if row.command == "compare":
        labels = kw.pop("labels")
        return lambda: ssptk.compare(labels, out=str(out), **kw)
    return lambda: ssptk.run(out=str(out), **kw)


@pytest.mark.parametrize("row", params())
def test_api(row: Row, workspace: Workspace) -> None:
    from ssptk.launch import warm

    before = {p.pid for p in ssptk_descendants(os.getpid())}
    warm_before = {p.pid for p in warm_processes()}
    idle_before = [id(c) for c in warm.idle_clusters()]
    message = row.api_message or row.message
    if row.failed_run:
        with pytest.raises(RunFailed, match=message) as failed:
            api_call(row, workspace.out(row))()
        assert "\n" not in str(failed.value) and "Traceback" not in str(failed.value)
        assert failed.value.result.run_dir == str(workspace.out(row))
    else:
        with pytest.raises(UsageError, match=message) as refused:
            api_call(row, workspace.out(row))()
        assert "\n" not in str(refused.value) and "Traceback" not in str(refused.value)
        if row.out == "fresh":  # the mistake is reported ahead of a non-empty --out, and leaves it be
            with pytest.raises(UsageError, match=message):
                api_call(row, workspace.existing)()
    left = wait_none(lambda: [p for p in ssptk_descendants(os.getpid()) if p.pid not in before], 10)
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"
    assert {p.pid for p in warm_processes()} <= warm_before and [id(c) for c in warm.idle_clusters()] == idle_before
    assert not cluster_processes(str(workspace.root))
    workspace.check(row)


# --- %dtrain in a real kernel (one kernel for the whole table) ------------------------------------

@pytest.fixture(scope="module")
def dtrain_kernel(tmp_path_factory: pytest.TempPathFactory):
    """A real IPython kernel with ssptk loaded, whose working directory must stay empty, and whose
    ``PYTHONPATH`` (inherited by the tasks it starts) makes ``tests/fixtures`` importable."""
    from jupyter_client.manager import start_new_kernel

    cwd = tmp_path_factory.mktemp("kernel-cwd")
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(cwd),
                              env=dict(os.environ, PYTHONPATH=fixtures_pythonpath()))
    pid = km.provisioner.pid
    try:
        reply, _ = run_cell(kc, "%load_ext ssptk")
        assert reply["status"] == "ok", reply
        yield SimpleNamespace(km=km, kc=kc, cwd=cwd, pid=pid)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    assert not wait_none(lambda: tasks_under(cwd), 10), "tasks left after the kernel shut down"


def _texts(outputs: list[dict]) -> str:
    return "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")


def check_kernel_clean(kernel: SimpleNamespace, workspace: Workspace) -> None:
    left = wait_none(lambda: ssptk_descendants(kernel.pid), 10)
    assert not left, f"kernel processes left behind: {[(p.pid, p.cmdline()) for p in left]}"
    assert not cluster_processes(str(workspace.root))
    assert list(kernel.cwd.iterdir()) == [], "something was created in the kernel's working directory"


@pytest.mark.slow
@pytest.mark.parametrize("row", params())
def test_kernel(row: Row, dtrain_kernel: SimpleNamespace, workspace: Workspace) -> None:
    tokens = [*([row.command] if row.command != "run" else []), *row.args, "--out", str(workspace.out(row)),
              *row.kernel_extra]
    reply, outs = run_cell(dtrain_kernel.kc, "%dtrain " + shlex.join(tokens), timeout=300)
    assert "Traceback" not in _texts(outs)
    if row.failed_run:  # the reason in one line; then only the task's log tail and where the logs are
        assert reply["status"] == "error" and reply["ename"] == "RunFailed", reply
        (err,) = _errors(outs)
        evalue = reply["evalue"]
        assert "\n" not in evalue and evalue.startswith("worker:") and re.search(row.message, evalue), evalue
        assert err["traceback"][0] == f"RunFailed: {evalue}"
        assert all(TAIL_LINE.match(ln) for ln in err["traceback"][1:]), err["traceback"]
    else:
        evalue = _usage_error(reply, outs)
        assert evalue.startswith("%dtrain: ") and re.search(row.message, evalue), evalue
    check_kernel_clean(dtrain_kernel, workspace)
    workspace.check(row)


@pytest.mark.slow
@pytest.mark.parametrize("row", [pytest.param(r, id=r.id, marks=r.marks) for r in ROWS
                                 if r.command == "run" and not r.failed_run])
def test_kernel_background(row: Row, dtrain_kernel: SimpleNamespace, workspace: Workspace) -> None:
    """``--background`` refuses the same mistakes, in the cell, with the same line (it used to show
    "starting the cluster…" forever and raise only at ``.wait()``)."""
    tokens = [*row.args, "--out", str(workspace.out(row)), *row.kernel_extra, "--background"]
    reply, outs = run_cell(dtrain_kernel.kc, "bg = %dtrain " + shlex.join(tokens), timeout=120)
    assert "Traceback" not in _texts(outs)
    evalue = _usage_error(reply, outs)
    assert evalue.startswith("%dtrain: ") and re.search(row.message, evalue), evalue
    check_kernel_clean(dtrain_kernel, workspace)
    workspace.check(row)


# --- commands with no Python-API twin here: sim and report ------------------------------------------

OTHER = [
    pytest.param(("sim", "--mode", "bsp"), r"unknown mode 'bsp'", id="sim-unknown-mode"),
    pytest.param(("sim", "--mode", "sync", "--staleness", "1"), r"--staleness applies to ssp only, not sync",
                 id="sim-staleness-with-sync"),
    pytest.param(("report", "/nonexistent/ssptk-dir"), r"/nonexistent/ssptk-dir is not a directory",
                 id="report-missing-dir"),
]


@pytest.mark.parametrize(("args", "message"), OTHER)
def test_cli_other_commands(args: tuple[str, ...], message: str, workspace: Workspace) -> None:
    p = subprocess.run([*ssptk_cmd(), *args], capture_output=True, text=True, timeout=120, cwd=workspace.root)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("ssptk: error: ") and re.search(message, line), line
    workspace.check(Row("other", (), {}, ""))


@pytest.mark.slow
@pytest.mark.parametrize(("args", "message"), OTHER)
def test_kernel_other_commands(args: tuple[str, ...], message: str, dtrain_kernel: SimpleNamespace,
                               workspace: Workspace) -> None:
    reply, outs = run_cell(dtrain_kernel.kc, "%dtrain " + shlex.join(args), timeout=120)
    assert "Traceback" not in _texts(outs)
    check_kernel_clean(dtrain_kernel, workspace)
    evalue = _usage_error(reply, outs)  # the cell must fail, so that Run All stops
    assert evalue.startswith("%dtrain: ") and re.search(message, evalue), evalue
