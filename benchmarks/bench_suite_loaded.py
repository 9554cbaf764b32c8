"""The test suite on a busy machine (issue 36, point 7): the README's test command on a fresh clone, once quiet and
once while two CPU hogs keep both cores busy, must have no failure either time.

A suite that passes only on a quiet machine has tests that assert how fast something ran rather than what it did;
a laptop running another test suite and a notebook is where users run it. Each hog is a process spinning in a loop
(``python -c 'while True: pass'``), one per core of this 2-core machine, started before the suite and killed after
it. The rows are the failures and errors of each run (target 0) and their times; the quiet time is the suite's own
(CONTRIBUTING and the README quote it), the loaded one what it costs a user whose machine is busy.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

from harness import HERE, Context, Row, at_most

#: the CPU hogs while the suite runs loaded: one per core here
HOGS = 2
#: the whole suite may take this long before it counts as hung
SUITE_TIMEOUT_S = 3 * 3600
#: pytest's last line, framed by ``=`` or, with ``-q``, bare: ``1303 passed, 3 skipped in 639.71s (0:10:39)``
_SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in ([\d.]+)s", re.M)


def _counts(text: str) -> tuple[dict[str, int], float | None]:
    """pytest's last summary line: ``{"passed": N, "failed": N, ...}`` and its seconds."""
    found = _SUMMARY.findall(text)
    if not found:
        return {}, None
    words, seconds = found[-1]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (\w+)", words)}
    return counts, float(seconds)


def _suite(clone: str, hogs: int, ctx: Context, label: str) -> tuple[dict[str, int], float | None]:
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        t0 = time.monotonic()
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        if ctx.quick:
            args += ["-m", "not slow"]
        # every process the suite starts imports the clone's ssptk, whatever this Python has installed
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (clone, os.environ.get("PYTHONPATH")) if p))
        out = subprocess.run(args, cwd=clone, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S,
                             check=False)
        took = time.monotonic() - t0
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    counts, seconds = _counts(out.stdout)
    if not counts:  # say how it ended, rather than only that no summary was found
        ctx.note(f"{label}: no pytest summary; the output ended: {' | '.join(out.stdout.splitlines()[-3:])[-400:]}")
    failed = [ln for ln in out.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    ctx.note(f"{label}: {', '.join(f'{n} {k}' for k, n in counts.items()) or 'no summary'} in "
             f"{seconds if seconds is not None else took:.0f} s" + (f"; {'; '.join(failed[:8])}" if failed else ""))
    return counts, seconds if seconds is not None else took


def bench_suite_loaded(ctx: Context) -> list[Row]:
    """The suite quiet, then under :data:`HOGS` CPU hogs: failures and errors (0 each), and the times."""
    root = os.path.dirname(HERE)
    clone = os.path.join(tempfile.mkdtemp(prefix="ssptk-suite-", dir=ctx.tmp), "ssptk")
    subprocess.run(["git", "clone", "-q", root, clone], check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout
    command = "python -m pytest" + (' -m "not slow"' if ctx.quick else "")
    ctx.note(f"A fresh clone of this checkout ({head.strip()}), `{command}` in it with this Python, once quiet, then "
             f"with {HOGS} processes spinning on the CPU.")
    quiet, quiet_s = _suite(clone, 0, ctx, "quiet")
    loaded, loaded_s = _suite(clone, HOGS, ctx, f"{HOGS} CPU hogs")
    rows = []
    for label, counts, seconds in (("quiet", quiet, quiet_s), ("loaded", loaded, loaded_s)):
        bad = counts.get("failed", 0) + counts.get("errors", 0) + counts.get("error", 0) if counts else None
        rows.append(Row(f"suite {label}: failures and errors", None if bad is None else float(bad), at_most(0), ".0f"))
        rows.append(Row(f"suite {label}: minutes", None if seconds is None else seconds / 60, None, ".1f"))
    return rows
