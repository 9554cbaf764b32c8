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

Once the task knows its run directory it keeps its log there (:meth:`StderrFilter.keep_log`, ``logs/<task>.log``):
everything its fd 2 carries, unfiltered, what came before the log was opened included, and whatever :func:`to_log`
adds (the full traceback of a failure the stderr says in one line). From then on the stderr also leaves out
TensorFlow's own information and warning lines (``I0000 ... grpc_server_lib.cc] Started server``) and the error lines
gRPC writes when a call to another task breaks (``UNAVAILABLE``, ``Socket closed``, ...: a peer died), with the lines
that continue them: the log has them, and the task's own line says what failed. Other error lines (a port it cannot
bind) and fatal ``F`` lines always show. Imports: core, runtime.
"""
from __future__ import annotations

import atexit
import contextlib
import glob
import os
import re
import select
import sys
import threading

from ssptk.core.errors import is_tf_noise
from ssptk.runtime.reaper import before_exit

__all__ = ["TF_LOGS_ENV", "StderrFilter", "quiet_stderr", "to_log"]

#: ``SSPTK_TF_LOGS=1``: a task's stderr as TensorFlow writes it, start-up chatter included
TF_LOGS_ENV = "SSPTK_TF_LOGS"
_PIPE_BYTES = 1 << 20
_PARTIAL_S = 0.5  # a line without its end yet (a prompt, a progress bar) is shown after this long
_EARLY_BYTES = 1 << 20  # what is kept for the log until it is opened
#: a line of TensorFlow's C++ logging (absl): severity, date (``0000`` before absl is set up), time, thread, source
_TF_LOG = re.compile(rb"^[IWE]\d{4} \d\d:\d\d:[\d.]+ +\d+ [\w.]+:\d+\] ")
#: what an error line says when a call to another task broke or was called off (that task died, or this one ends):
#: the peer's death seen from here, which the task's own line says; other errors (a port it cannot bind) still show
_PEER_GONE = re.compile(rb"\b(?:UNAVAILABLE|CANCELLED|ABORTED)\b|Socket closed|Connection reset|failed to connect")
#: how the lines that continue a multi-line TensorFlow log record begin (a status's details, the node it came from)
_GOES_ON = re.compile(rb"^(?:[ \t]|Additional GRPC error information|:UNKNOWN:|\[\[)")
_active: list[StderrFilter] = []  # this process's filter, for to_log


class StderrFilter:
    """Forwards the lines read from ``read_fd`` to ``out_fd``, less TensorFlow's chatter (``gpu_lines``: the "no GPU"
    lines too)."""

    def __init__(self, read_fd: int, out_fd: int, gpu_lines: bool, show_all: bool = False) -> None:
        self.read_fd, self.out_fd, self.gpu_lines, self.show_all = read_fd, out_fd, gpu_lines, show_all
        self.pending = b""
        self.lock = threading.Lock()
        self.pid = os.getpid()  # a forked child inherits this object (and maybe a held lock), not the thread
        self.log_fd: int | None = None
        self.early = b""  # what the log gets when it is opened
        self.in_record = False  # the last line was (part of) a TensorFlow log record left out of the stderr
        os.set_blocking(read_fd, False)

    def keep_log(self, path: str) -> bool:
        """From now on every line (and what came before) also goes, unfiltered, to the file ``path`` (appended), and
        the stderr leaves out TensorFlow's log lines; ``False`` (nothing changed) when the file cannot be opened."""
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        except OSError:
            return False
        with self.lock:
            self.log_fd, early, self.early = fd, self.early, b""
            _write_all(fd, early)
        return True

    def write_log(self, text: bytes) -> bool:
        """Add ``text`` to the log only (after what the pipe holds now); ``False`` when there is no log."""
        if self.log_fd is None or os.getpid() != self.pid:
            return False
        if not self.lock.acquire(timeout=2.0):
            return False
        try:
            self._pump()
            _write_all(self.log_fd, text)
        finally:
            self.lock.release()
        return True

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
                        self.in_record = False  # a record's lines come together: what comes later is new
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
        if not text:
            return
        if self.log_fd is not None:
            _write_all(self.log_fd, text)
        elif len(self.early) < _EARLY_BYTES:
            self.early += text[:_EARLY_BYTES - len(self.early)]
        if self.show_all:
            _write_all(self.out_fd, text)
            return
        _write_all(self.out_fd, b"".join(ln for ln in text.splitlines(keepends=True) if self._shown(ln)))

    def _shown(self, line: bytes) -> bool:
        """Whether ``line`` goes to the stderr (see the module's text)."""
        if self.log_fd is not None:
            if _TF_LOG.match(line) and (not line.startswith(b"E") or _PEER_GONE.search(line)):
                self.in_record = True
                return False
            if self.in_record and _GOES_ON.match(line):
                return False
            self.in_record = False
        return not is_tf_noise(line.decode(errors="replace"), self.gpu_lines)


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(fd, data):]


def _no_gpu() -> bool:
    """Whether no GPU can be used here: no NVIDIA device file, or ``CUDA_VISIBLE_DEVICES`` hides them all."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1")
    return hidden or not glob.glob("/dev/nvidia[0-9]*")


def to_log(text: str) -> bool:
    """Add ``text`` to this task's log only (a traceback its stderr says in one line); ``False`` where the task keeps
    no log of its own (a launcher's task: its stderr is its log)."""
    return bool(_active) and _active[0].write_log(text.encode(errors="replace"))


def quiet_stderr() -> StderrFilter | None:
    """Filter this process's fd 2 (see the module's text); call before TensorFlow is imported. Under
    ``SSPTK_TF_LOGS=1`` every line shows (and the log still gets them). ``None`` (nothing done) where fd 2 is not
    open."""
    if not hasattr(select, "poll"):
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
    f = StderrFilter(read_fd, out_fd, gpu_lines=_no_gpu(), show_all=os.environ.get(TF_LOGS_ENV) == "1")
    _active[:] = [f]
    threading.Thread(target=f.run, name="quiet-stderr", daemon=True).start()
    atexit.register(f.drain)
    before_exit(f.drain)
    return f
