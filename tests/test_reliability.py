"""Reliability, second round: one run per directory, honest exit codes, signals to the launcher.

Real clusters on localhost; every test that starts one proves its tasks are gone.
"""
from __future__ import annotations

import io
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, assert_gone, skip_or_fail, ssptk_cmd

from ssptk.core.errors import UsageError
from ssptk.rundir import RunDir
from ssptk.rundir.claim import CLAIM_FILE

QUICK = ["--workers", "2", "--gpus", "none", "--stall-timeout", "60"]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(FIXTURES), os.environ.get("PYTHONPATH", ""))
                                                       if p))


def _summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


# --- one run per directory ----------------------------------------------------------------------

def test_racing_creators_get_the_directory_once(tmp_path: Path) -> None:
    """16 threads create the same run directory at once: exactly one wins; the others are told who has it."""
    out = tmp_path / "same"
    won: list[str] = []
    refused: list[str] = []
    go = threading.Barrier(16)

    def create() -> None:
        go.wait()
        try:
            won.append(RunDir.create(str(out), "async").path)
        except UsageError as e:
            refused.append(str(e))

    threads = [threading.Thread(target=create) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 15, (won, refused)
    assert all("is in use by run async (pid" in m and "choose another --out" in m for m in refused), refused
    claim = json.loads((out / CLAIM_FILE).read_text())
    assert claim["pid"] == os.getpid() and claim["mode"] == "async"


def test_default_directories_of_runs_started_in_one_second_differ(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    paths = {RunDir.create(None, "sync").path for _ in range(5)}
    assert len(paths) == 5


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_text("x"), r"exists and is a file: choose another --out"),
    (lambda p: None, r"cannot create output directory \S+: a part of the path is a file, not a directory"),
    (lambda p: None, r"cannot create output directory \S+: the name is too long for the file system"),
])
def test_directories_that_cannot_be_made_are_refused_in_one_line(tmp_path: Path, make, message: str) -> None:
    target = tmp_path / "out"
    make(target)
    if "part of the path" in message:
        (tmp_path / "plain").write_text("x")
        target = tmp_path / "plain" / "run"
    elif "too long" in message:
        target = tmp_path / ("x" * 300)
    with pytest.raises(UsageError, match=message):
        RunDir.create(str(target), "sync")


_CREATE = ("import sys\nfrom ssptk.core.errors import UsageError\nfrom ssptk.rundir import RunDir\n"
           "try:\n    RunDir.create(sys.argv[1], 'sync')\nexcept UsageError as e:\n    print(e)\n")


def _unable_to_write(how: str, parent: Path) -> list[str]:
    """The command line prefix under which ``parent`` cannot be written, even as root (CI runs as root, and
    root writes into a chmod 555 directory): a read-only bind mount of it in a private mount namespace, or
    (``chmod``) mode 555 for a process without CAP_DAC_OVERRIDE."""
    root = os.geteuid() == 0
    if how == "chmod":
        parent.chmod(0o555)
        if not root:
            return []
        wrap = ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", "--"]
    else:
        wrap = ["unshare", "-m" if root else "-rm", "sh", "-c", 'mount --bind -o ro "$1" "$1" && shift && exec "$@"',
                "sh", str(parent)]
    if shutil.which(wrap[0]) is None or subprocess.run([*wrap, "true"], capture_output=True).returncode != 0:
        skip_or_fail(f"cannot make {parent} read-only here: {shlex.join(wrap)} does not run")
    return wrap


@pytest.mark.parametrize("how", ["read-only mount", "chmod"])
def test_a_read_only_parent_is_refused_in_one_line(tmp_path: Path, how: str) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    try:
        wrap = _unable_to_write(how, parent)
        p = subprocess.run([*wrap, sys.executable, "-c", _CREATE, str(parent / "run")], capture_output=True,
                           text=True, timeout=60)
    finally:
        parent.chmod(0o755)
    assert p.returncode == 0 and not p.stderr, p.stderr
    assert p.stdout == f"cannot create output directory {parent / 'run'}: permission denied (read-only or not " \
                       "yours): choose another --out\n", p.stdout
    assert list(parent.iterdir()) == []


@pytest.mark.slow
def test_two_runs_started_together_on_one_out_one_runs_one_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    argv = [*ssptk_cmd(), "run", "--mode", "async", "--steps", "60", *QUICK, "--out", str(out)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=240) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], (codes, results)
    refused = next(err for p, (_, err) in zip(procs, results, strict=True) if p.returncode == 2)
    assert refused.strip().count("\n") == 0 and "Traceback" not in refused, refused
    assert f"{out} is in use by run async" in refused or "exists and is not empty" in refused, refused
    starts = [line for line in (out / "workers" / "worker-0.jsonl").read_text().splitlines() if '"start"' in line]
    assert len(starts) == 1, "two runs wrote into one directory"
    assert _summary(out)["status"] == "ok"
    assert_gone(str(out))


# --- a failed run never exits 0 -----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("model, task", [("exits_everywhere", "worker:"), ("worker1_exits", "worker:1")])
def test_a_worker_that_exits_0_without_finishing_fails_the_run_at_once(tmp_path: Path, model: str,
                                                                       task: str) -> None:
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = subprocess.run([*ssptk_cmd(), "run", "--mode", "async", "--steps", "2000", *QUICK,
                           "--model", f"usermodels:{model}", "--out", str(out)],
                          capture_output=True, text=True, timeout=240, env=_env())
    took = time.monotonic() - t0
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "exited without finishing" in proc.stderr and task in proc.stderr, proc.stderr
    summary = _summary(out)
    assert summary["status"] == "failed" and summary["failed_task"].startswith(task)
    assert "exited without finishing" in summary["reason"]
    assert took < 55, f"named after {took:.0f} s: blamed by the stall watchdog (60 s), not at once"
    assert_gone(str(out))


# --- signals to the launcher behave like Ctrl-C --------------------------------------------------

def _start_long_run(out: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([*ssptk_cmd(), "run", "--mode", "async", "--steps", "1000000", *QUICK,
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "workers" / "worker-0.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (log.exists() and log.read_text().count('"step"') > 10):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_the_run_like_ctrl_c(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    out = tmp_path / "run"
    proc = _start_long_run(out)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, (proc.returncode, err[-2000:])
    assert f"stopped by {sig.name}" in err and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == f"ssptk: stopped by {sig.name}; every task was stopped, the logs and " \
                                           f"summary kept in {out}", err
    summary = _summary(out)
    assert summary["status"] == "interrupted" and summary["signal"] == sig.name
    assert summary["reason"] == f"ssptk: stopped by {sig.name}" and summary["total_steps"] > 10
    assert_gone(str(out))


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_shutdown_keeps_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _start_long_run(out)
    assert proc.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True)
    reader.start()
    proc.send_signal(signal.SIGTERM)
    # Only once SIGTERM was taken: two signals pending at once are handled in signal-number order (SIGINT
    # first), whatever order they came in.
    seen = []
    while not any("SIGTERM: stopping every task" in line for line in seen):
        seen.append(lines.get(timeout=60))
    for _ in range(5):  # while the tasks are being stopped and the summary written
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    err = "".join(seen) + "".join(lines.get() for _ in range(lines.qsize()))
    assert proc.returncode == 143, (proc.returncode, err[-2000:])
    assert "Traceback" not in err, err
    assert "SIGINT: already stopping (after SIGTERM)" in err, f"no SIGINT came during the shutdown: {err}"
    summary = _summary(out)
    assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM"
    assert_gone(str(out))


# --- ssptk report only reads ----------------------------------------------------------------------

def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _synthetic_run(path: Path, summary: dict | None) -> Path:
    try:
        from test_analysis import write_run
    except ImportError:
        from tests.test_analysis import write_run
    records = [(10.0 + 0.1 * (k + 1), k % 2, k // 2 + 1, 1.0 / (k + 1), 0.0, 1) for k in range(40)]
    return write_run(path, records, workers=2, mode="async", staleness=0, start=10.0,
                     done={0: 14.0, 1: 14.0}, summary=summary, partial=False)


def test_report_on_one_run_prints_its_summary_and_writes_nothing(tmp_path: Path) -> None:
    reason = "worker:1 (exit code 1): error: loss became nan at step 12"
    run = _synthetic_run(tmp_path / "failed", {"status": "failed", "reason": reason, "failed_task": "worker:1",
                                               "mode": "async", "workers": 2, "total_steps": 40,
                                               "train_cpu_s": 3.5, "cpu_ms_per_step": 87.5})
    before = _snapshot(run)
    for _ in range(2):
        p = subprocess.run([*ssptk_cmd(), "report", str(run)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert p.stdout.count("loss became nan") == 1 and "worker:1 (exit code 1): worker:1" not in p.stdout
    assert _snapshot(run) == before, "ssptk report changed the run directory"


def test_report_on_a_run_without_summary_computes_one_in_memory(tmp_path: Path) -> None:
    run = _synthetic_run(tmp_path / "by-hand", None)
    before = _snapshot(run)
    p = subprocess.run([*ssptk_cmd(), "report", str(run)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "40 minibatches" in p.stdout and "nothing was written" in p.stdout
    assert _snapshot(run) == before
    (run / "config.json").write_text('{"options": {"mod')  # truncated
    p = subprocess.run([*ssptk_cmd(), "report", str(run)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip() == f"ssptk: error: {run / 'config.json'} has no run options (truncated or not " \
                               "ssptk's): cannot summarise the run"


# --- nothing left in the temp directory -----------------------------------------------------------

def test_stale_launcher_directories_are_swept(tmp_path: Path) -> None:
    from ssptk.launch.tempdirs import sweep_stale_dirs

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [tmp_path / f"ssptk-tasks-{dead.pid}-abc", tmp_path / f"ssptk-warm-{dead.pid}-xyz"]
    kept = [tmp_path / f"ssptk-warm-{os.getpid()}-live", tmp_path / "ssptk-warm-oldstyle", tmp_path / "other-1-2"]
    for d in stale + kept:
        (d / "logs").mkdir(parents=True)
    assert sorted(sweep_stale_dirs(str(tmp_path))) == sorted(str(d) for d in stale)
    assert all(d.exists() for d in kept) and not any(d.exists() for d in stale)


@pytest.mark.slow
def test_an_allreduce_run_leaves_nothing_in_the_temp_directory(tmp_path: Path, monkeypatch) -> None:
    """Each allreduce worker used to leave ~8 ``__autograph_generated_file*.py`` in the system temp directory.
    Here the launcher's temp directory is a private one, so other processes' files cannot blur the check."""
    import tempfile

    import ssptk

    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    r = ssptk.run(mode="allreduce", workers=2, steps=20, gpus="none", out=str(tmp_path / "run"))
    assert r.ok
    assert sorted(p.name for p in private.iterdir()) == [], "left in the temp directory"
    assert_gone(str(tmp_path))


# --- start-up -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_worker_killed_during_start_up_is_named_at_once_not_restarted(tmp_path: Path) -> None:
    """--restart-failed with a worker killed before the start barrier hung 120 s, then blamed worker:0."""
    import psutil
    from conftest import cluster_processes

    out = tmp_path / "run"
    proc = subprocess.Popen([*ssptk_cmd(), "run", "--mode", "async", "--steps", "50", *QUICK, "--restart-failed",
                             "1", "--model", "usermodels:slow_build_on_worker1", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    log = out / "logs" / "worker-1.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (log.exists() and "SSPTK_TEST_BUILDING" in log.read_text()):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    assert log.exists() and "SSPTK_TEST_BUILDING" in log.read_text(), "worker:1 never began to build its model"
    victims = [p for p in cluster_processes(str(out)) if "worker:1" in " ".join(p.cmdline())]
    assert victims, "worker:1 not found"
    t0 = time.monotonic()
    victims[0].send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 1, err[-2000:]
    assert "worker:1" in err and "during start-up: not restarted" in err, err
    assert took < 15, f"named after {took:.0f} s"
    assert not psutil.pid_exists(victims[0].pid) or victims[0].status() == psutil.STATUS_ZOMBIE
    assert_gone(str(out))


def test_a_model_that_hangs_at_import_is_refused_in_one_line(monkeypatch) -> None:
    from ssptk.core.options import resolve
    from ssptk.experiment import single

    monkeypatch.setattr(single, "MODEL_IMPORT_TIMEOUT_S", 1.0)
    monkeypatch.syspath_prepend(str(FIXTURES))
    t0 = time.monotonic()
    with pytest.raises(UsageError, match=r"model 'usermodel_hangs:model': importing it and calling it did not "
                                         r"finish within 1 s; does its module run something long"):
        single.check_before_start(resolve(model="usermodel_hangs:model", gpus="none"))
    assert time.monotonic() - t0 < 10


# what each corruption makes `ssptk report` name on stderr (one line for that file)
_NAMED = {
    "config.json truncated": r"async/config.json: not JSON \(truncated, or not ssptk's\): skipped",
    "config.json a list": r"async/config.json: not a JSON object: skipped",
    "config.json without options": r"async/config.json: it has no run options: skipped",
    "workers three": r"async/config.json: its options workers, steps cannot be read: skipped",
    "a step with t abc": r"async/workers/worker-0.jsonl: 1 line skipped \(not a record",
    "an event with worker zz": r"async/workers/worker-0.jsonl: 1 line skipped \(not a record",
    "final.json params 5": r"async/model/final.json: its params is not as docs/run-directory.md has it: left out",
    "summary.json a list": r"async/summary.json: not a JSON object: skipped",
    "binary garbage in a log": r"async/workers/worker-1.jsonl: 1 line skipped \(not a record",
}
_CORRUPT = {
    "config.json truncated": lambda d: (d / "config.json").write_text('{"options": {"mo'),
    "config.json a list": lambda d: (d / "config.json").write_text("[1, 2]"),
    "config.json without options": lambda d: (d / "config.json").write_text('{"cluster": {}}'),
    "workers three": lambda d: (d / "config.json").write_text('{"options": {"mode": "async", "workers": "three"}}'),
    "a step with t abc": lambda d: open(d / "workers" / "worker-0.jsonl", "a").write(
        '{"t": "abc", "worker": 0, "step": 99, "global_step": 3, "loss": 1.0}\n'),
    "an event with worker zz": lambda d: open(d / "workers" / "worker-0.jsonl", "a").write(
        '{"event": "done", "t": 15.0, "worker": "zz"}\n'),
    "final.json params 5": lambda d: ((d / "model").mkdir(exist_ok=True),
                                      (d / "model" / "final.json").write_text('{"params": 5}')),
    "summary.json a list": lambda d: (d / "summary.json").write_text("[]"),
    "binary garbage in a log": lambda d: open(d / "workers" / "worker-1.jsonl", "ab").write(b"\xff\xfe\x00x\n"),
}


@pytest.mark.parametrize("what", list(_CORRUPT))
def test_report_reads_around_malformed_files(tmp_path: Path, what: str, capsys) -> None:
    """Each of these crashed ``ssptk report`` with a 14-35 line traceback; now the report is built from what
    can be read, and it writes nothing but report.html."""
    from ssptk.cli import main

    summary = {"status": "ok", "mode": "async", "workers": 2, "final_loss": 0.1, "total_steps": 40}
    for label in ("sync", "async"):
        _synthetic_run(tmp_path / "cmp" / label, dict(summary, mode=label))
    _CORRUPT[what](tmp_path / "cmp" / "async")
    before = _snapshot(tmp_path / "cmp")
    assert main(["report", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "report: " in out.out
    warnings = [line for line in out.err.splitlines() if line.startswith("ssptk: warning: ")]
    assert len(warnings) == 1 and re.search(_NAMED[what], warnings[0]), out.err
    after = _snapshot(tmp_path / "cmp")
    assert {k: v for k, v in after.items() if k != "report.html"} == before
    assert main(["report", str(tmp_path / "cmp" / "async")]) in (0, 2)  # one run: read, or one line
    assert "Traceback" not in capsys.readouterr().err


# --- start-up: its own phase, with progress -------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.slow
def test_start_up_progress_names_the_tasks_still_starting(run_dir: Path) -> None:
    """The CLI's bar says how many tasks are up and which are awaited, before the first step."""
    import ssptk
    from ssptk.render import ProgressBar

    screen = _Terminal()
    bar = ProgressBar("async ", stream=screen)
    result = ssptk.run(mode="async", workers=2, steps=20, gpus="none", out=str(run_dir), progress=bar)
    bar.close()
    assert result.ok
    shown = [part.replace("\033[K", "") for part in screen.getvalue().split("\r") if part]
    assert shown[0] == "async starting: 0/3 tasks ready (waiting for ps:0, worker:0, worker:1)", shown
    starts = [s for s in shown if "starting:" in s]
    assert starts[-1] == "async starting: 3/3 tasks ready" and len(starts) >= 2, starts
    assert shown[-1].startswith("async [##############################] 40/40"), shown
