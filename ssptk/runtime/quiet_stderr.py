"""A task's stderr without TensorFlow's start-up chatter, for the tasks no ssptk launcher started (Slurm, TF_CONFIG,
a cluster spec given by hand), whose stderr is what the user reads (``slurm-<job>.out``).

TensorFlow's libraries log through absl before ``absl::InitializeLog`` is called, and ``TF_CPP_MIN_LOG_LEVEL`` does
not reach those lines (``WARNING: All log messages before absl::InitializeLog() ...``, ``cudart_stub.cc ... Could
not find cuda drivers``, ``cuda_platform.cc ... failed call to cuInit``), nor is there an environment setting for
absl's own threshold. So, before TensorFlow loads, :func:`quiet_stderr` points fd 2 at a pipe, and a thread forwards
every line to the real stderr as it comes, except the known chatter (:func:`ssptk.core.errors.is_tf_noise`; the
"no GPU" lines only on a host without a GPU device). Python's lines, tracebacks, TensorFlow's errors and fatal
checks all get through, and in their order. Nothing is lost when the task ends: :meth:`StderrFilter.drain` forwards
what the pipe still holds at interpreter exit and before :func:`ssptk.runtime.reaper.exit_with_descendants` ends the
process (a SIGTERM included). Limits: a process killed by another signal (SIGKILL, the abort of a fatal check) may
lose the lines of its last instant that the thread had not read; the pipe holds 1 MiB, so C++ code that writes more
while it holds Python's GIL would wait for it. ``SSPTK_TF_LOGS=1`` turns the filter off (everything shows).
Imports: core, runtime.
"""
from __future__ import annotations

import atexit
import contextlib
import glob
import os
import select
import sys
import threading

from ssptk.core.errors import is_tf_noise
from ssptk.runtime.reaper import before_exit

__all__ = ["ENV", "StderrFilter", "quiet_stderr"]

#: ``SSPTK_TF_LOGS=1``: a task's stderr as TensorFlow writes it, start-up chatter included
ENV = "SSPTK_TF_LOGS"
_PIPE_BYTES = 1 << 20
_PARTIAL_S = 0.5  # a line without its end yet (a prompt, a progress bar) is shown after this long


class StderrFilter:
    """Forwards the lines read from ``read_fd`` to ``out_fd``, less TensorFlow's chatter (``gpu_lines``: the "no GPU"
    lines too)."""

    def __init__(self, read_fd: int, out_fd: int, gpu_lines: bool) -> None:
        self.read_fd, self.out_fd, self.gpu_lines = read_fd, out_fd, gpu_lines
        self.pending = b""
        self.lock = threading.Lock()
        self.pid = os.getpid()  # a forked child inherits this object (and maybe a held lock), not the thread
        os.set_blocking(read_fd, False)

    def run(self) -> None:
        """The thread's loop: until the pipe's last writer is gone."""
        poller = select.poll()
        poller.register(self.read_fd, select.POLLIN)
        try:
            while True:
                ready = poller.poll(_PARTIAL_S * 1000)
                with self.lock:
                    if not ready:
                        self._forward(self.pending)
                        self.pending = b""
                    elif not self._pump():
                        return
        finally:
            with contextlib.suppress(OSError):
                os.dup2(self.out_fd, 2)  # this thread gone: nothing may be left writing into a pipe no one reads

    def drain(self) -> None:
        """Forward what the pipe holds now, the last unfinished line included (the process is about to end)."""
        if os.getpid() != self.pid:
            return  # a forked child's end: the task's thread forwards its lines
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        if not self.lock.acquire(timeout=2.0):  # the thread is stuck writing, or a signal came in the middle of this
            return
        try:
            self._pump()
            self._forward(self.pending)
            self.pending = b""
        finally:
            self.lock.release()

    def _pump(self) -> bool:
        """Read what the pipe holds and forward its whole lines; ``False`` at its end."""
        while True:
            try:
                data = os.read(self.read_fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                data = b""
            if not data:
                self._forward(self.pending)
                self.pending = b""
                return False
            *lines, self.pending = (self.pending + data).split(b"\n")
            self._forward(b"".join(ln + b"\n" for ln in lines))

    def _forward(self, text: bytes) -> None:
        keep = b"".join(ln for ln in text.splitlines(keepends=True)
                        if not is_tf_noise(ln.decode(errors="replace"), self.gpu_lines))
        with contextlib.suppress(OSError):
            while keep:
                keep = keep[os.write(self.out_fd, keep):]


def _no_gpu() -> bool:
    """Whether no GPU can be used here: no NVIDIA device file, or ``CUDA_VISIBLE_DEVICES`` hides them all."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1")
    return hidden or not glob.glob("/dev/nvidia[0-9]*")


def quiet_stderr() -> StderrFilter | None:
    """Filter this process's fd 2 (see the module's text); call before TensorFlow is imported. ``None`` (nothing
    done) under ``SSPTK_TF_LOGS=1`` or where fd 2 is not open."""
    if os.environ.get(ENV) == "1" or not hasattr(select, "poll"):
        return None
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    try:
        out_fd = os.dup(2)  # not inheritable: the processes this task starts write into the pipe, filtered too
    except OSError:
        return None
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError, AttributeError):
        import fcntl

        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    f = StderrFilter(read_fd, out_fd, gpu_lines=_no_gpu())
    threading.Thread(target=f.run, name="quiet-stderr", daemon=True).start()
    atexit.register(f.drain)
    before_exit(f.drain)
    return f
