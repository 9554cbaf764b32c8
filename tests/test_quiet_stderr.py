"""A task no launcher started shows its stderr less TensorFlow's start-up chatter (ssptk.runtime.quiet_stderr): real
processes write to fd 2 with os.write, as TensorFlow's C++ code does, and end as tasks end (return, os._exit through
the reaper, SIGTERM); every other line reaches stderr, promptly, and none is lost at the end."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ssptk.core.errors import is_tf_noise, log_tail

NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795791757.673970    2817 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will "
    "not be used.",
    "E0000 00:00:1795791769.722511    2817 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed "
    "call to cuInit: UNKNOWN ERROR (303)",
    "I0000 00:00:1795791812.490477    4902 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
    "compiler flags.",
]
REAL = [
    "ssptk worker: error: worker:1: a real line",
    "Traceback (most recent call last):",
    '  File "train.py", line 3, in <module>',
    "ValueError: boom",
    "E0000 00:00:1795791812.1 4902 master_session.cc:1] Cleanup partition error: UNAVAILABLE: recvmsg",
    "F0000 00:00:1795791812.2 4902 cuda_platform.cc:9] Check failed: failed call to cuInit",  # fatal: never dropped
]
BURST = 3000  # lines written just before the end: more than the thread forwards before os._exit, unless drained
LAST = "the last words, with no line end"

SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    from ssptk.runtime.reaper import exit_with_descendants, reap_on_sigterm
    reap_on_sigterm()
    from ssptk.runtime.quiet_stderr import quiet_stderr
    quiet_stderr()
    end, lines, burst, last = sys.argv[1], sys.argv[2].split("\\n"), int(sys.argv[3]), sys.argv[4]
    for ln in lines:
        os.write(2, (ln + "\\n").encode())
    # a process the task starts writes through the filter too
    subprocess.run([sys.executable, "-c", "import os; os.write(2, b'child line\\\\n' + %r.encode() + b'\\\\n')"
                    % lines[0]], check=True)
    print("written", flush=True)
    if end == "sigterm":
        sys.stdin.readline()  # the test sees the lines above while this process still runs
    os.write(2, "".join(f"burst {i}\\n" for i in range(burst)).encode() + last.encode())
    if end == "os_exit":
        exit_with_descendants(0)
    if end == "sigterm":  # as scancel does, right after the writes
        os.kill(os.getpid(), 15)
        time.sleep(60)
""")


def _start(end: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if k != "SSPTK_TF_LOGS"}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, end, "\n".join(NOISE + REAL), str(BURST), LAST],
                            env={**base, "CUDA_VISIBLE_DEVICES": "", **(env or {})}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _check(err: str) -> None:
    lines = err.split("\n")
    assert not [ln for ln in lines if ln in NOISE], err[:2000]
    assert [ln for ln in lines if ln in REAL] == REAL, err[:2000]  # all of them, in their order
    assert lines.count("child line") == 1, err[:2000]
    assert [ln for ln in lines if ln.startswith("burst ")] == [f"burst {i}" for i in range(BURST)]
    assert err.endswith(LAST), err[-300:]


@pytest.mark.parametrize("end", ["return", "os_exit"])
def test_noise_dropped_and_nothing_lost_at_the_end(end: str) -> None:
    """The process ends right after its last writes, by returning (atexit) or through the reaper's os._exit."""
    proc = _start(end)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == "written\n"
    _check(err)


def test_lines_come_promptly_and_sigterm_loses_none() -> None:
    """A line shows while the task still runs; SIGTERM (scancel) ends it with its last lines forwarded."""
    proc = _start("sigterm")
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == "written\n"
    seen, deadline = "", time.monotonic() + 20
    while "ValueError: boom" not in seen and time.monotonic() < deadline:
        if select.select([proc.stderr], [], [], 0.2)[0]:
            seen += os.read(proc.stderr.fileno(), 65536).decode()
    assert "ValueError: boom" in seen, f"stderr still held after 20 s: {seen!r}"
    _, rest = proc.communicate("go\n", timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, rest
    _check(seen + rest)


def test_ssptk_tf_logs_shows_everything() -> None:
    proc = _start("os_exit", {"SSPTK_TF_LOGS": "1"})
    _, err = proc.communicate(timeout=60)
    lines = err.split("\n")
    assert [ln for ln in lines if ln in NOISE] == NOISE + NOISE[:1]  # the task's, then its child's line
    assert [ln for ln in lines if ln in REAL] == REAL


def test_no_gpu_lines_are_news_where_a_gpu_is_expected(tmp_path: os.PathLike[str]) -> None:
    cuinit, cpu = NOISE[2], NOISE[3]
    assert is_tf_noise(cuinit) and not is_tf_noise(cuinit, gpu_lines=False)
    assert is_tf_noise(cpu, gpu_lines=False)
    assert not any(is_tf_noise(ln) for ln in REAL)
    log = os.path.join(tmp_path, "worker-0.log")
    with open(log, "w") as f:
        f.write("\n".join(NOISE + REAL) + "\n")
    assert log_tail(log) == REAL  # the log tails shown to users leave out the same lines


#: what gRPC and TensorFlow wrote to a worker's stderr when its PS was killed (issue 36), and their start-up line
TF_LOG_LINES = [
    "I0000 00:00:1795876136.388207    5877 grpc_server_lib.cc:467] Started server with target: grpc://localhost:36333",
    "W0000 00:00:1795876136.779944    6079 local_rendezvous.cc:412] Local rendezvous is aborting with status: "
    "UNAVAILABLE: Socket closed",
    "Additional GRPC error information from remote target /job:ps/replica:0/task:0 while calling "
    "/tensorflow.WorkerService/RecvTensor:",
    ':UNKNOWN:Error received from peer  {grpc_message:"Socket closed", grpc_status:14}',
    "\t [[{{node step_meta_S17}}]]",
    "E0000 00:00:1795876136.779611    5956 master_session.cc:1972] Cleanup partition error: UNAVAILABLE: "
    "recvmsg:Connection reset by peer",
]
SHOWN = ["ssptk worker: error: worker:0: lost ps:0 at localhost:1 (Socket closed): ...", "  a line of the user's",
         "E0000 00:00:1795877654.313396   15925 add_port.cc:83] Failed to add port to server: No address added out of "
         "total 1 resolved for '0.0.0.0:43905'",  # not a peer's death: news
         "F0000 00:00:1795791812.2 4902 cuda_platform.cc:9] Check failed: a fatal one"]

LOG_SCRIPT = textwrap.dedent("""
    import os, sys
    from ssptk.runtime.quiet_stderr import quiet_stderr, to_log
    f = quiet_stderr()
    os.write(2, b"before the log\\n")
    f.keep_log(sys.argv[1])
    for ln in sys.argv[2].split("\\n"):
        os.write(2, (ln + "\\n").encode())
    to_log("Traceback (most recent call last):\\n  the peer's death in full\\n")
""")


def test_a_task_with_its_own_log_keeps_tensorflows_lines_and_tracebacks_there(tmp_path: os.PathLike[str]) -> None:
    """Once the task keeps its log (a task no launcher started, in its host's directory): its stderr leaves out
    TensorFlow's I/W lines and the E lines of a peer's death, with the lines that continue them (another error and a
    fatal F line still show); the log has every line, those written before it was opened too, and what to_log adds."""
    log = os.path.join(tmp_path, "logs", "worker-0.log")
    env = {k: v for k, v in os.environ.items() if k != "SSPTK_TF_LOGS"}
    lines = TF_LOG_LINES + SHOWN[:2] + TF_LOG_LINES[-1:] + SHOWN[2:]
    p = subprocess.run([sys.executable, "-c", LOG_SCRIPT, log, "\n".join(lines)], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == ["before the log", *SHOWN], p.stderr
    with open(log) as f:
        kept = f.read()
    assert kept == "before the log\n" + "".join(ln + "\n" for ln in lines) + \
        "Traceback (most recent call last):\n  the peer's death in full\n", kept
