"""A disk that fills at every point of a run's end (issue 26.6): the checkpoint, ``model/final.json``,
``summary.json``, the TensorBoard event files. One line naming the device and the file, exit 1, and every file
complete or absent: no ``.tmp`` file, no half checkpoint, no TensorBoard folder missing a worker, no summary
saying ok of a run that failed.

The end is filled page by page in one process each (``tests/fixtures/fill_points.py``, on a small tmpfs in a
private mount namespace as ``test_disk_full.py`` makes them); one real run on a small disk checks it end to end.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, assert_gone, ssptk_cmd
from test_disk_full import FULL, QUICK, on_small_disk

pytestmark = pytest.mark.slow

POINTS = f"PYTHONPATH={shlex.quote(str(ROOT))} {shlex.quote(sys.executable)} {FIXTURES / 'fill_points.py'}"


def _points(done: object) -> list[dict]:
    out = getattr(done, "stdout", "")
    points = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert points and points[-1]["error"] is None, (out, getattr(done, "stderr", "")[-3000:])
    return points


def test_the_end_of_a_run_on_a_disk_full_at_every_page(tmp_path: Path) -> None:
    """summary.json, then the TensorBoard files: at each point either a failure naming the full disk with a summary
    that says failed (or none), and no event file at all; or, once everything fits, every file."""
    recorded = FIXTURES / "recorded" / "ssp2-straggler"
    points = _points(on_small_disk(tmp_path, f"{POINTS} finish {shlex.quote(str(recorded))}"))
    *failed, fits = points
    assert len(failed) >= 5, points  # the summary and each of the four event files met a full disk
    for p in failed:
        assert re.fullmatch("ssptk: " + FULL, p["error"]), p
        assert p["files"] in ([], ["summary.json"]) and p["status"] in (None, "failed"), p
    assert any("/tensorboard/worker_2/" in p["error"] for p in failed), "never full at the last event file"
    assert fits["status"] == "ok" and len([f for f in fits["files"] if "events.out.tfevents" in f]) == 4, fits


def test_a_checkpoint_that_does_not_fit_is_absent_and_said_in_one_line(tmp_path: Path) -> None:
    """TensorFlow's saver (data file, index, state file through checkpoint.tmp<hex>) at each free page: DiskFull
    naming model/ckpt and an empty model/, until the whole checkpoint fits."""
    *failed, fits = _points(on_small_disk(tmp_path, f"{POINTS} checkpoint"))
    assert len(failed) >= 3, failed
    for p in failed:
        assert re.fullmatch(FULL, p["error"]) and p["error"].endswith("/run/model/ckpt: free space or choose --out "
                                                                       "elsewhere"), p
        assert p["files"] == [], p
    assert fits["files"] == ["model/checkpoint", "model/ckpt.data-00000-of-00001", "model/ckpt.index"], fits


def test_a_run_whose_disk_fills_at_its_end_says_so_and_leaves_whole_files(tmp_path: Path) -> None:
    """A real run on a 56 KB disk, which fills after the logs (at final.json, the summary or the event files: it
    left ``.events...tmp`` files and half a tensorboard/ folder, and exited 0)."""
    run = shlex.join([*ssptk_cmd(), "run", "--mode", "async", "--steps", "20", *QUICK]) + ' --out "$DISK/run"'
    done = on_small_disk(tmp_path, f'{run}; echo "rc=$?"; cp -a "$DISK/run" "$KEEP/run"', size="56k")
    kept = tmp_path / "keep" / "run"
    files = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
    assert not [f for f in files if ".tmp" in f or "tempstate" in f], files
    events = [f for f in files if "events.out.tfevents" in f]
    summary = json.loads((kept / "summary.json").read_text()) if (kept / "summary.json").exists() else None
    if "rc=0" in done.stdout:  # it all fitted: then all of it is there
        assert summary is not None and summary["status"] == "ok" and len(events) == 3, files
    else:
        assert "rc=1" in done.stdout, (done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        first = done.stderr.splitlines()[0]
        assert re.fullmatch(r"ssptk: run failed: (ssptk|worker:0 \(exit code 28\): error): " + FULL, first), first
        assert len(events) in (0, 3) and (summary is None or summary["status"] == "failed"), (files, summary)
        ckpt = ["model/checkpoint", "model/ckpt.data-00000-of-00001", "model/ckpt.index"]
        assert [f for f in files if f.startswith("model/")] in ([], ckpt, [*ckpt, "model/final.json"]), files
    for p in kept.rglob("*.json"):
        assert isinstance(json.loads(p.read_text()), dict), p
    assert_gone(str(tmp_path))
