"""Paths a user gives that are not the files they should be (issue 36, point 3), and the CLI's output of the paths it
was given (point 6): every refusal is one line, exit 2, before any process starts or ``--out`` is made.

``--jitter trace:/dev/zero`` ran a machine out of memory (17.5 GB: the 64 MiB cap used the size the file system
gave, 0), ``trace:FIFO`` and an ``--out`` whose run claim is a FIFO hung before any run, ``--cluster @FIFO`` hung a
task, ``--gather FILE`` ended in a traceback, and ``compare`` printed its ``--out`` raw to the terminal. Each case
runs the real CLI in a subprocess, its address space held to a few GiB, so that a regression fails here instead of
taking the machine down.
"""
from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import assert_gone, cluster_processes, ssptk_cmd

#: The most address space a refused command may take: far more than a refusal needs (no TensorFlow is imported).
_LIMIT = 6 * 2**30
ESCAPES = "\x1b]0;TITLE\x07\x1b[31m"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_LIMIT, _LIMIT))


def _cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ssptk_cmd(), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          preexec_fn=_limited)


def _refused(p: subprocess.CompletedProcess[str], prefix: str = "ssptk: error: ") -> str:
    """The one line of a refusal (exit 2, nothing on stdout, no traceback)."""
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stdout == "", (p.returncode, p.stderr[-2000:])
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(prefix), line
    return line


@pytest.fixture
def not_files(tmp_path: Path) -> dict[str, str]:
    """A FIFO, a device, a link to a device, a socket (held open: it exists while bound)."""
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero.csv")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "socket"))
    yield {"a FIFO": str(tmp_path / "fifo"), "a device": "/dev/zero", "a device ": str(tmp_path / "zero.csv"),
           "a socket": str(tmp_path / "socket")}
    sock.close()


@pytest.mark.parametrize("command", [("run",), ("compare", "sync", "async"), ("sim", "--model", "linear")])
def test_a_trace_that_is_not_a_file_is_refused_before_anything_starts(tmp_path: Path, not_files: dict[str, str],
                                                                      command: tuple[str, ...]) -> None:
    for kind, path in not_files.items():
        out = tmp_path / "out"
        p = _cli(*command, "--jitter", f"trace:{path}", "--steps", "5", "--out", str(out), cwd=tmp_path, timeout=60)
        line = _refused(p)
        assert line == f"ssptk: error: --jitter trace:{path}: {kind.strip()}, not a regular file; give a run " \
                       "directory or a CSV of worker,seconds", line
        assert not out.exists() and not cluster_processes(str(tmp_path))


def test_a_cluster_file_that_is_not_a_file_is_refused_by_the_task(tmp_path: Path, not_files: dict[str, str]) -> None:
    """``ssptk worker --cluster @FILE`` (tasks started by hand): a FIFO hung the task, /dev/zero filled its memory."""
    for kind, path in {**not_files, "no such file or directory": str(tmp_path / "missing.json")}.items():
        p = _cli("worker", "--cluster", f"@{path}", "--task", "worker:0", "--steps", "2", "--out",
                 str(tmp_path / "out"), cwd=tmp_path, timeout=60)
        line = _refused(p, "ssptk worker: error: ")
        assert line.startswith(f"ssptk worker: error: --cluster @{path}: {kind.strip()}"), line
        assert line.endswith('give a JSON file of {"ps": [...], "worker": [...]}'), line
    assert not (tmp_path / "out").exists()


def test_an_out_whose_run_claim_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / ".ssptk-run")
    line = _refused(_cli("run", "--steps", "2", "--out", str(out), cwd=tmp_path, timeout=60))
    assert line == f"ssptk: error: {out} holds only an unreadable run claim: remove {out / '.ssptk-run'} to reuse it, " \
                   "or choose another --out"
    assert sorted(os.listdir(out)) == [".ssptk-run"] and not cluster_processes(str(tmp_path))


def test_gather_into_something_that_is_not_a_directory_is_one_line(tmp_path: Path) -> None:
    """``ssptk report HOSTDIR --gather FILE`` ended in a NotADirectoryError traceback; the file is kept."""
    host = tmp_path / "host0"
    (host / "workers").mkdir(parents=True)
    (host / "config.json").write_text(json.dumps({"options": {"mode": "async", "workers": 1}}))
    (tmp_path / "afile").write_text("mine\n")
    os.mkfifo(tmp_path / "fifo")
    cases = {str(tmp_path / "afile"): "it is a regular file, not a directory",
             str(tmp_path / "fifo"): "it is a FIFO, not a directory",
             "/dev/null": "it is a device, not a directory",
             str(tmp_path / "afile" / "sub"): "a part of the path is a file, not a directory"}
    for dest, why in cases.items():
        line = _refused(_cli("report", str(host), "--gather", dest, cwd=tmp_path, timeout=120))
        assert line == f"ssptk: error: cannot gather into {dest}: {why}: give --gather a new directory", line
    assert (tmp_path / "afile").read_text() == "mine\n"


@pytest.mark.slow
def test_compare_runs_one_suffixed_label_alone_and_prints_its_out_escaped(tmp_path: Path) -> None:
    """``compare async+dc`` alone was refused as an unknown mode (it worked beside another label); the
    comparison's last line printed the control characters of its ``--out`` raw, to the terminal."""
    out = tmp_path / f"cmp{ESCAPES}"
    p = subprocess.run([*ssptk_cmd(), "compare", "async+dc", "--workers", "2", "--steps", "10", "--out", str(out)],
                       capture_output=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert b"\x1b" not in p.stdout + p.stderr and b"\x07" not in p.stdout + p.stderr
    last = p.stdout.decode().strip().splitlines()[-1]
    assert last == f"report: {tmp_path}/cmp\\x1b]0;TITLE\\x07\\x1b[31m/report.html", last
    config = json.loads((out / "async+dc" / "config.json").read_text())
    assert config["options"]["mode"] == "async" and config["options"]["lr_staleness"] == "dc:0.04"
    assert_gone(str(tmp_path))
