"""``ssptk report DIR DIR --gather OUT`` copies each host's files from the descriptor it checked: a FIFO swapped in for a
worker's log after any check by path is never opened for a blocking read (the gather used to check a file by its
path, then copy it by its path again)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _host(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    (host / "workers").mkdir(parents=True)
    (host / "config.json").write_text(json.dumps({"options": {"mode": "async", "workers": 2}, "cluster": {},
                                                  "created": 0.0}))
    (host / "workers" / "worker-0.jsonl").write_text('{"event": "start", "t": 1.0, "worker": 0}\n')
    os.mkfifo(host / "workers" / "worker-1.jsonl")
    return host


def test_a_fifo_swapped_in_after_the_check_is_left_behind_not_read(tmp_path: Path) -> None:
    host, out = _host(tmp_path), tmp_path / "gathered"
    # the swap, made deterministic: every check by path says worker-1.jsonl is the regular worker-0.jsonl
    code = textwrap.dedent(f"""
        import os
        from ssptk.rundir.gather import gather
        fifo, regular = {str(host / "workers" / "worker-1.jsonl")!r}, {str(host / "workers" / "worker-0.jsonl")!r}
        real = os.stat
        os.stat = lambda p, *a, **k: real(regular if os.fspath(p) == fifo else p, *a, **k)
        said = []
        gather([{str(host)!r}], {str(out)!r}, said.append)
        print(said)
    """)
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == repr([f"{host / 'workers' / 'worker-1.jsonl'}: not a regular file: left behind"])
    assert sorted(os.listdir(out / "workers")) == ["worker-0.jsonl"]
    assert (out / "workers" / "worker-0.jsonl").read_text() == '{"event": "start", "t": 1.0, "worker": 0}\n'
    assert (out / "config.json").read_text() == (host / "config.json").read_text()
