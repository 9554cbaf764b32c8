"""`ssptk report ... | head`: a reader that stops early ends the command quietly (exit 141, like SIGPIPE), without
the BrokenPipeError traceback users met (issue 23)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import ssptk_cmd

RECORDED = Path(__file__).resolve().parent / "fixtures" / "recorded" / "ssp2-straggler"


def test_a_closed_pipe_is_a_quiet_exit() -> None:
    p = subprocess.Popen([*ssptk_cmd(), "report", str(RECORDED)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the first line
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
