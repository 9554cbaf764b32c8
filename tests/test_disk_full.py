"""Full disks and read-only file systems, made real: each test mounts a small tmpfs in a private mount
namespace (``unshare -rm``, as root or not), runs ssptk there, and copies what it left out for the checks.

What must hold: one line naming the device and the file, exit 1 (2 for a directory that cannot be used),
no traceback, JSONL files of whole lines only, and every JSON file complete or absent.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from conftest import ROOT, assert_gone, skip_or_fail, ssptk_cmd

QUICK = ["--workers", "2", "--gpus", "none", "--stall-timeout", "60"]
FULL = r"no space left on the tmpfs file system on \S+ while writing \S+: free space or choose --out elsewhere"


@cache
def _namespaces_allowed() -> bool:
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True) if shutil.which("unshare") else None
    return probe is not None and probe.returncode == 0


@pytest.fixture(autouse=True)
def small_disks_can_be_made() -> None:
    if not _namespaces_allowed():
        skip_or_fail("needs mount namespaces (unshare -rm) to make a small disk")


def on_small_disk(tmp_path: Path, commands: str, size: str = "1m", read_only: bool = False,
                  timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run shell ``commands`` with ``$DISK`` a fresh tmpfs of ``size``; ``$KEEP`` is a directory outside
    it, for what the checks must see after the namespace (and the disk) is gone."""
    disk, keep = tmp_path / "disk", tmp_path / "keep"
    disk.mkdir()
    keep.mkdir()
    options = f"size={size}" + (",ro" if read_only else "")
    script = f"mount -t tmpfs -o {options} none {disk} && cd {shlex.quote(str(ROOT))} && {commands}"
    # the test session's fork server sees other files than this mount namespace: not asked (it would say so)
    env = {**{k: v for k, v in os.environ.items() if k != "SSPTK_FORK_SERVER"}, "DISK": str(disk), "KEEP": str(keep)}
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, env=env,
                          timeout=timeout)


def _ssptk_run(*args: str) -> str:
    """A shell command running ``ssptk run ARGS --out "$DISK/run"``."""
    return shlex.join([*ssptk_cmd(), "run", *args]) + ' --out "$DISK/run"'


def _assert_files_whole(run: Path) -> None:
    """Every JSONL line parses, every JSON file parses, no temporary file is left."""
    files = [p for p in run.rglob("*") if p.is_file()]
    assert not [p for p in files if ".tmp" in p.name], files
    for p in files:
        if p.suffix == ".jsonl":
            for n, line in enumerate(p.read_text().splitlines(), 1):
                assert isinstance(json.loads(line), dict), f"{p}:{n}: {line[-80:]!r}"
        elif p.suffix == ".json":
            assert isinstance(json.loads(p.read_text()), dict), p


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["processes", "shared"])
def test_a_disk_that_fills_mid_run_ends_it_in_one_line_with_whole_files(tmp_path: Path, layout: str) -> None:
    """A long async run on a 1 MB disk: its workers' logs fill it within seconds. In the shared layout the
    process may not get its line naming the worker onto the full disk: then it is named itself."""
    run = _ssptk_run("--mode", "async", "--steps", "70000", "--layout", layout, *QUICK)
    done = on_small_disk(tmp_path, f'{run}; echo "rc=$?"; cp -a "$DISK/run" "$KEEP/run"')
    assert "rc=1" in done.stdout, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and len(lines) == 2, done.stderr
    assert re.search(r"run failed: (worker:\d|shared) \(exit code 28\): " + FULL, lines[0]), lines
    assert lines[1].startswith("logs kept in ")
    kept = tmp_path / "keep" / "run"
    _assert_files_whole(kept)
    assert sum(len(p.read_text().splitlines()) for p in (kept / "workers").glob("*.jsonl")) > 1000
    assert_gone(str(tmp_path))


def test_a_full_disk_before_start_is_one_line_and_leaves_no_file(tmp_path: Path) -> None:
    run = _ssptk_run("--mode", "async", "--steps", "50", *QUICK)
    done = on_small_disk(tmp_path, f'dd if=/dev/zero of="$DISK/fill" bs=4k 2>/dev/null; {run}; echo "rc=$?"; '
                                   f'ls -A "$DISK/run"')
    assert done.stdout.splitlines()[0] == "rc=1", (done.stdout, done.stderr)
    assert done.stdout.splitlines()[1:] == [], "a full disk left files in the run directory"
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert re.fullmatch(r"ssptk: error: " + FULL + r"\n", done.stderr), done.stderr
    assert "/run/.ssptk-run: " in done.stderr
    assert_gone(str(tmp_path))


def test_the_recorder_takes_back_a_partial_line(tmp_path: Path) -> None:
    """Records written until the disk refuses: the error is DiskFull naming the file, and the file ends in
    a whole line (a full disk first takes part of a line)."""
    code = ("import os,sys\nfrom ssptk.runtime.recorder import Recorder\nfrom ssptk.core.errors import DiskFull\n"
            "r = Recorder(os.environ['DISK'] + '/w.jsonl', 0)\n"
            "try:\n    [r.event('pad', text='x' * 997, n=i) for i in range(10**6)]\n"
            "except DiskFull as e:\n    print(e)\n"
            "os.system('cp \"$DISK/w.jsonl\" \"$KEEP/\"')\n")
    done = on_small_disk(tmp_path, f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}", size="64k")
    assert re.fullmatch(FULL + "\n", done.stdout) and "/w.jsonl" in done.stdout, (done.stdout,
                                                                                                done.stderr)
    lines = (tmp_path / "keep" / "w.jsonl").read_text().splitlines()
    assert len(lines) > 30 and all(json.loads(line)["text"] == "x" * 997 for line in lines)


def test_a_json_file_that_does_not_fit_is_absent_not_half(tmp_path: Path) -> None:
    code = ("import os\nfrom ssptk.rundir import RunDir\nfrom ssptk.core.errors import DiskFull\n"
            "rd = RunDir(os.environ['DISK'] + '/run')\n"
            "try:\n    rd.write_summary({'pad': 'x' * 200_000})\n"
            "except DiskFull as e:\n    print(e)\n"
            "print(sorted(os.listdir(rd.path)))\n")
    done = on_small_disk(tmp_path, f"mkdir \"$DISK/run\" && {shlex.quote(sys.executable)} -c {shlex.quote(code)}",
                         size="64k")
    first, listing = done.stdout.splitlines()
    assert re.fullmatch(FULL, first) and first.endswith("/run/summary.json: free space or choose "
                                                                      "--out elsewhere"), done
    assert listing == "[]", "a half-written summary (or its temporary file) was left"


def test_a_read_only_out_is_refused_in_one_line(tmp_path: Path) -> None:
    """A read-only file system, as root too (root may write into a chmod 555 directory, not onto ro)."""
    run = _ssptk_run("--mode", "async", "--steps", "50", *QUICK)
    done = on_small_disk(tmp_path, f'{run}; echo "rc=$?"', read_only=True)
    assert done.stdout.strip() == "rc=2", (done.stdout, done.stderr)
    assert re.fullmatch(r"ssptk: error: cannot create output directory \S+/disk/run: permission denied "
                                      r"\(read-only or not yours\): choose another --out\n", done.stderr), done.stderr
