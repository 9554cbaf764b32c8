"""``ssptk report`` on run directories that are hostile, not merely damaged (issue 26, item 7).

A run directory may come from anyone. Each case here crashed ``ssptk report`` with a traceback, hung it, or
let the directory drive the user's terminal; now every file is held to the contract (docs/run-directory.md),
only regular files are read, reads are bounded, control characters are shown escaped, and each bad file gets
one warning that names it. The ``ssptk report`` runs are real processes; the contract's checks are also
tested one by one in this process (no figures: fast).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ssptk_cmd

from ssptk.rundir import RunDir, read_run
from ssptk.rundir.check import unreadable

try:  # shared synthetic run directories
    from test_analysis import write_run
except ImportError:  # tests/ imported as a package
    from tests.test_analysis import write_run

ESCAPES = "\x1b]0;TITLE\x07\x1b[2J"


def _run(path: Path, summary: bool = True) -> Path:
    records = [(10.0 + 0.1 * (k + 1), k % 2, k // 2 + 1, 1.0 / (k + 1), 0.0, 1) for k in range(40)]
    return write_run(path, records, workers=2, mode="async", staleness=0, start=10.0, done={0: 14.0, 1: 14.0},
                     summary={"status": "ok", "mode": "async", "workers": 2, "final_loss": 0.1, "total_steps": 40}
                     if summary else None, partial=False)


def _edit(path: Path, **changes: object) -> None:
    obj = json.loads(path.read_text())
    for key, value in changes.items():
        target = obj
        *parents, last = key.split(".")
        for p in parents:
            target = target[p]
        target[last] = value
    path.write_text(json.dumps(obj))


def _as_dir(p: Path) -> None:
    p.unlink()
    p.mkdir()


def _as_fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def _lists(d: Path) -> None:
    (d / "summary.json").write_text("[1, 2, 3]")
    (d / "model").mkdir()
    (d / "model" / "final.json").write_text('{"params": [1]}')


def _escapes(d: Path) -> None:
    _edit(d / "config.json", **{"options.model": ESCAPES})
    _edit(d / "summary.json", status="failed", reason=ESCAPES, model=ESCAPES)


# case -> (what to do to run "async", which report (the comparison or the run), the warnings' regexes)
CASES: dict[str, tuple[Callable[[Path], None], str, list[str]]] = {
    "summary a list, final params a list": (
        _lists, "run", [r"async/summary\.json: not a JSON object: skipped$",
                        r"async/model/final\.json: its params is not as docs/run-directory\.md has it: left out$"]),
    "a worker log that is a directory": (
        lambda d: _as_dir(d / "workers" / "worker-1.jsonl"), "comparison",
        [r"async/workers/worker-1\.jsonl: a directory, not a regular file: skipped$"]),
    "a worker log that is a FIFO": (
        lambda d: _as_fifo(d / "workers" / "worker-1.jsonl"), "comparison",
        [r"async/workers/worker-1\.jsonl: a FIFO, not a regular file: skipped$"]),
    "summary.json a FIFO": (
        lambda d: _as_fifo(d / "summary.json"), "run", [r"async/summary\.json: a FIFO, not a regular file: skipped$"]),
    "escape sequences": (
        _escapes, "comparison", [r"async/config\.json: its text holds control characters: shown escaped$",
                                 r"async/summary\.json: its text holds control characters: shown escaped$"]),
}


def _report(target: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*ssptk_cmd(), "report", str(target)], capture_output=True, timeout=240)


def test_report_survives_hostile_directories(tmp_path: Path) -> None:
    """Real ``ssptk report`` processes, one per case, four at a time."""
    targets = {}
    for k, (make, which, _) in enumerate(CASES.values()):
        root = tmp_path / f"case{k}"
        for label in ("sync", "async"):
            _run(root / label)
        make(root / "async")
        targets[k] = root if which == "comparison" else root / "async"
    (tmp_path / "case4" / "sync").rename(tmp_path / "case4" / f"sy{ESCAPES}nc")  # a label that is an escape
    huge = _run(tmp_path / "huge" / "async", summary=False)
    _edit(huge / "config.json", **{"options.workers": 100_000_000})  # calibrate_overhead looped over them
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = {k: pool.submit(_report, t) for k, t in {**targets, "huge": huge}.items()}
        results = {k: f.result() for k, f in done.items()}
    for k, (name, (_, _, named)) in enumerate(CASES.items()):
        p = results[k]
        err = p.stderr.decode()
        assert p.returncode == 0, (name, err[-3000:])
        assert b"\x1b" not in p.stdout + p.stderr and b"\x07" not in p.stdout + p.stderr, name
        assert "Traceback" not in err, (name, err[-3000:])
        warnings = [line for line in err.splitlines() if line.startswith("ssptk: warning: ")]
        assert len(warnings) == len(named), (name, err)
        for pattern in named:
            assert sum(bool(re.search(pattern, w)) for w in warnings) == 1, (name, pattern, warnings)
    assert "\\x1b]0;TITLE\\x07\\x1b[2J" in results[4].stdout.decode()  # the label, shown escaped
    p = results["huge"]
    assert p.returncode == 2 and "Traceback" not in p.stderr.decode(), p.stderr[-2000:]
    assert p.stderr.decode().strip() == f"ssptk: error: {huge / 'config.json'} has no run options (truncated or not " \
                                        "ssptk's): cannot summarise the run"


def test_a_one_run_report_of_escapes_prints_them_escaped(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    _escapes(run)
    p = _report(run)
    assert p.returncode == 0 and b"\x1b" not in p.stdout + p.stderr and b"\x07" not in p.stdout + p.stderr
    assert "failed    \\x1b]0;TITLE\\x07\\x1b[2J" in p.stdout.decode()


# --- the contract, file by file (in this process: no report, no figures) ------------------------------

def _append(d: Path, record: dict | str, worker: int = 0) -> None:
    with open(d / "workers" / f"worker-{worker}.jsonl", "a") as f:
        f.write((record if isinstance(record, str) else json.dumps(record)) + "\n")


STEP = {"t": 11.0, "worker": 0, "step": 99, "global_step": 3, "loss": 1.0, "wait_s": 0.0, "staleness": 0,
        "minibatch": 5, "delay_s": 0.0, "applied": True}
SKIPPED = r"1 line skipped \(not a record as docs/run-directory\.md describes it\)$"

UNIT: dict[str, tuple[Callable[[Path], object], str]] = {
    "a step's loss a string": (lambda d: _append(d, {**STEP, "loss": "abc"}), r"worker-0\.jsonl: " + SKIPPED),
    "a step number past 2**53": (lambda d: _append(d, {**STEP, "step": 10**30}), r"worker-0\.jsonl: " + SKIPPED),
    "a worker index past the limit": (lambda d: _append(d, {**STEP, "worker": 10**8}), r"worker-0\.jsonl: " + SKIPPED),
    "an eval loss figures cannot draw": (lambda d: _append(d, {"event": "eval", "t": 12.0, "worker": 0,
                                                               "global_step": 3, "eval_loss": 1e308}),
                                         r"worker-0\.jsonl: " + SKIPPED),
    "a record nested past the recursion limit": (lambda d: _append(d, "[" * 100_000 + "]" * 100_000),
                                                 r"worker-0\.jsonl: " + SKIPPED),
    "a line longer than a MiB": (lambda d: _append(d, json.dumps({**STEP, "x": "a" * 2**21})),
                                 r"worker-0\.jsonl: " + SKIPPED),
    "a worker log that is /dev/zero": (lambda d: ((d / "workers" / "worker-1.jsonl").unlink(),
                                                  os.symlink("/dev/zero", d / "workers" / "worker-1.jsonl")),
                                       r"worker-1\.jsonl: a device, not a regular file: skipped$"),
    "a worker log whose index is past the limit": (lambda d: _append(d, {**STEP, "worker": 0}, worker=10**5),
                                                   r"worker-100000\.jsonl: a worker index of 10000 or more: skipped$"),
    "workers/ a file": (lambda d: (shutil.rmtree(d / "workers"), (d / "workers").write_text("x")),
                        r"async/workers: not a directory: skipped$"),
    "a straggler of 1e300 s": (lambda d: _edit(d / "config.json", **{"options.straggler": [[0, 1e300]]}),
                               r"config\.json: its options\.straggler is not as docs/run-directory\.md has it: "
                               r"left out$"),
    "a jitter that is a number": (lambda d: _edit(d / "config.json", **{"options.jitter": 5}),
                                  r"config\.json: its options\.jitter is not as"),
    "launched a string": (lambda d: _edit(d / "config.json", launched="x"), r"config\.json: its launched is not as"),
    "workers a hundred million": (lambda d: _edit(d / "config.json", **{"options.workers": 10**8}),
                                  r"config\.json: its options workers cannot be read: skipped$"),
    "summary status unknown": (lambda d: _edit(d / "summary.json", status="weird", wall_s="x"),
                               r"summary\.json: its wall_s, status are not as docs/run-directory\.md has them: "
                               r"left out$"),
    "summary traffic's busiest pair": (lambda d: _edit(d / "summary.json", traffic={"busiest": ["a", "b"]}),
                                       r"summary\.json: its traffic is not as"),
    "final.json a FIFO": (lambda d: ((d / "model").mkdir(), os.mkfifo(d / "model" / "final.json")),
                          r"model/final\.json: a FIFO, not a regular file: skipped$"),
    "config.json larger than 16 MiB": (lambda d: (d / "config.json").write_text(" " * (16 * 2**20 + 1) + "{}"),
                                       r"config\.json: larger than 16 MiB: skipped$"),
    "traffic.json's tasks": (lambda d: (d / "traffic.json").write_text('{"tasks": {"ps:0": {"sent": "x"}}}'),
                             r"traffic\.json: its tasks is not as"),
}


@pytest.mark.parametrize("case", list(UNIT))
def test_each_bad_file_is_named_once_and_read_around(tmp_path: Path, case: str) -> None:
    run = _run(tmp_path / "async")
    make, named = UNIT[case]
    make(run)
    lines = unreadable(run)
    assert len(lines) == 1 and re.search(named, lines[0]), lines
    steps, _ = read_run(run)  # whatever is left is what the contract says: it reads, and nothing is infinite
    rd = RunDir(run)
    for obj in (rd.config(), rd.summary(), rd.final()):
        json.dumps(obj, allow_nan=False)
    assert steps["worker"].between(0, 1).all() and (steps["t"].abs() < 1e11).all()


def test_a_sparse_worker_log_is_read_only_up_to_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 3 GiB worker log (sparse: it costs no disk) is read up to the bound (1 GiB; 4 MiB here, to be quick),
    one warning saying so; its zeros are one line too long, skipped."""
    from ssptk.rundir import logs

    monkeypatch.setattr(logs, "MAX_LOG_BYTES", 4 * 2**20)
    run = _run(tmp_path / "async")
    with open(run / "workers" / "worker-1.jsonl", "ab") as f:
        f.truncate(3 * 2**30)
    lines = unreadable(run)
    assert len(lines) == 1 and lines[0].endswith("worker-1.jsonl: larger than 4 MiB: read up to there; 1 line "
                                                  "skipped (not a record as docs/run-directory.md describes it)"), lines
    assert len(read_run(run)[0]) == 40


def test_printable_escapes_what_acts_on_a_terminal() -> None:
    from ssptk.core.printable import printable

    assert printable("plain ssp:2 \u00e9 \u4e2d") == "plain ssp:2 \u00e9 \u4e2d"
    assert printable(ESCAPES) == "\\x1b]0;TITLE\\x07\\x1b[2J"
    assert printable("a\rb\x9bc\u202ed\u2028") == "a\\x0db\\x9bc\\u202ed\\u2028"
    assert printable("two\nlines\tand", keep="\n") == "two\nlines\\x09and"
