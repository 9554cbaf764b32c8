"""A shared fork server (``python -m ssptk.worker --fork-server --listen PATH``) serves its owner and no one else,
and a launcher trusts no server but its own user's, nor any pid but a task it checked (ssptk.runtime.fork_listen,
ssptk.launch.fork_trust): tried with a real second user, ``nobody``, both ways. And the server works as the README
says to start it, in a plain shell."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import ROOT, assert_gone, fork_server_env, listening_fork_server, skip_or_fail, ssptk_cmd

from ssptk.runtime import fork_server

pytestmark = pytest.mark.slow

#: a connection as ``nobody`` to the server at argv[1], asking it to fork a task that imports the model file argv[2]:
#: prints what became of it (refused at connect, closed unserved, or served) as one JSON line
_CLIENT = r"""
import json, os, socket, sys
path, model = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    s.connect(path)
except OSError as e:
    print(json.dumps({"connect": e.strerror})); sys.exit()
argv = [sys.executable, "-m", "ssptk.worker", "--cluster", '{"ps": ["localhost:1"], "worker": ["localhost:2"]}',
        "--task", "ps:0", "--model", model]
log = os.open(os.devnull, os.O_WRONLY)
replies = []
try:  # a connection closed unserved ends in EOF, or in ECONNRESET (closed with the request unread)
    socket.send_fds(s, [json.dumps({"argv": argv, "env": {}, "cwd": "/", "cgroup": None, "stdin": False,
                                    "namespace": 0}).encode()], [log])
    s.settimeout(120)
    while True:
        data = s.recv(1 << 16)
        if not data:
            break
        replies.append(json.loads(data))
        if "exit" in replies[-1] or "error" in replies[-1]:
            break
except (ConnectionResetError, BrokenPipeError):
    pass
print(json.dumps({"replies": replies}))
"""

#: a fake fork server at argv[1] (run as whoever starts it) that answers every request with pid argv[2] and logs, to
#: argv[3], each connection's bytes and descriptors; with argv[4] == "describe" it writes its own description
#: (argv[5]: the settings, JSON), else the test writes one
_FAKE = r"""
import json, os, select, socket, sys
path, victim, log, describe = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "describe"
srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
os.umask(0)
srv.bind(path)
srv.listen(8)
if describe:
    with open(path + ".server.tmp", "w") as f:
        json.dump({"pid": os.getpid(), "ns": {n: os.readlink(f"/proc/self/ns/{n}") for n in ("mnt", "user")},
                   "env": json.loads(sys.argv[5])}, f)
    os.replace(path + ".server.tmp", path + ".server")
conns = []
with open(log, "a") as out:
    print("listening", flush=True, file=out)
    while True:
        ready, _, _ = select.select([srv, *conns], [], [])
        for r in ready:
            if r is srv:
                conns.append(srv.accept()[0])
                print("connection", flush=True, file=out)
                continue
            try:
                data, fds, _, _ = socket.recv_fds(r, 1 << 20, 8)
            except OSError:
                data, fds = b"", []
            if not data:
                conns.remove(r)
                r.close()
                continue
            print(json.dumps({"bytes": len(data), "fds": len(fds)}), flush=True, file=out)
            r.send(json.dumps({"pid": victim}).encode())
"""


@pytest.fixture
def nobody() -> list[str]:
    """The command prefix that runs a command as the user ``nobody`` (a real second user)."""
    if os.geteuid() != 0:
        skip_or_fail("running as another user needs root: run these tests as root")
    if shutil.which("setpriv") is None:
        skip_or_fail("setpriv (util-linux) is missing: install util-linux")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        skip_or_fail("there is no user nobody")
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


@pytest.fixture
def common_dir() -> Iterator[Path]:
    """A directory both users reach and write to, sticky as /tmp is (pytest's tmp_path is root's only)."""
    path = Path(tempfile.mkdtemp(prefix="ssptk-trust-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _wait_for(path: str, proc: subprocess.Popen[bytes] | None = None, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not os.path.exists(path) and time.monotonic() < deadline and (proc is None or proc.poll() is None):
        time.sleep(0.05)
    assert os.path.exists(path), f"{path} did not appear"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_another_user_cannot_use_a_servers_socket_even_with_umask_000(nobody: list[str], common_dir: Path) -> None:
    """With umask 000, ``nobody`` once connected to root's server and had it import a file of theirs as uid 0. Now
    the socket is root's only (mode 0600, made so before it is reachable), and where the mode does not stop a peer
    (here widened by hand), the server drops it unserved for its uid (SO_PEERCRED)."""
    path = str(common_dir / "fs")
    marker = common_dir / "imported"
    model = common_dir / "evil.py"
    model.write_text(f"import os\nopen({str(marker)!r}, 'w').write(str(os.getuid()))\n"
                     "def m():\n    raise SystemExit(0)\n")
    model.chmod(0o644)
    log = common_dir / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(listening_fork_server(path), env=fork_server_env(PYTHONPATH=str(ROOT)), umask=0,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for(path + fork_server.DESCRIPTION, server)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, "the socket is not its owner's only"
        assert stat.S_IMODE(os.stat(path + fork_server.DESCRIPTION).st_mode) == 0o600

        def as_nobody() -> dict[str, object]:
            out = subprocess.run([*nobody, sys.executable, "-c", _CLIENT, path, f"{model}:m"], capture_output=True,
                                 text=True, timeout=180, cwd="/")
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)

        assert as_nobody() == {"connect": "Permission denied"}
        os.chmod(path, 0o666)  # the first wall down: the server's own check still holds
        assert as_nobody() == {"replies": []}, "the server answered another user"
        assert not marker.exists(), f"nobody's file was imported by uid {marker.read_text()}"
        assert server.poll() is None
        said = [ln for ln in log.read_text().splitlines() if "refused" in ln]
        assert len(said) == 1 and "uid 65534" in said[0] and "serves its owner (uid 0) only" in said[0], said
    finally:
        _stop(server)
    assert not os.path.exists(path), "the server did not remove its socket"


def _victim() -> subprocess.Popen[bytes]:
    """A process of root's that no launcher started: what a fake server claims as its task."""
    return subprocess.Popen(["sleep", "600"], start_new_session=True)


def _settings() -> dict[str, str]:
    """What a server started with, as its description gives it, for a launcher whose environment is
    :func:`fork_server_env` (so that the description alone cannot tell the fake from a real server)."""
    return {k: v for k, v in fork_server_env().items() if k.startswith(fork_server.AT_START) and k != "PYTHONPATH"}


@pytest.mark.parametrize("fake", ["nobody, described by nobody", "nobody, described by root", "root"])
def test_a_launcher_refuses_another_users_server_and_signals_no_pid_it_did_not_check(
        fake: str, nobody: list[str], common_dir: Path, tmp_path: Path) -> None:
    """A root launcher given ``SSPTK_FORK_SERVER=PATH`` where another user ran a fake server sent it its log and
    namespace descriptors, took the fake's ``{"pid": N}`` as ps:0 and killed the unrelated process N at the stop.
    Now it checks, before it sends anything, that the server runs as its own user (whoever wrote the description),
    says why in one line and starts its own; and a server of its own user's that answers with a pid that is not
    its child gets no signal to that pid either."""
    path = str(common_dir / "fs")
    victim = _victim()
    fake_log = common_dir / "fake.log"
    who = [] if fake == "root" else nobody
    describe = "describe" if fake != "nobody, described by root" else "test"
    server = subprocess.Popen([*who, sys.executable, "-c", _FAKE, path, str(victim.pid), str(fake_log), describe,
                               json.dumps(_settings())], cwd="/", start_new_session=True)
    try:
        _wait_for(path, server)
        if describe == "test":  # a description root wrote: only the server's credentials tell it from a real one
            about = {"pid": server.pid, "ns": {n: os.readlink(f"/proc/self/ns/{n}") for n in ("mnt", "user")},
                     "env": _settings()}
            Path(path + fork_server.DESCRIPTION).write_text(json.dumps(about))
        _wait_for(path + fork_server.DESCRIPTION, server)
        cgroup = Path(f"/proc/{victim.pid}/cgroup").read_text()
        out = subprocess.run([*ssptk_cmd(), "run", "--mode", "async", "--workers", "1", "--steps", "10", "--out",
                              str(tmp_path / "run")], env=fork_server_env(SSPTK_FORK_SERVER=path), cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert victim.poll() is None, "the launcher killed a process the fake server claimed"
        assert Path(f"/proc/{victim.pid}/cgroup").read_text() == cgroup, "the claimed process was moved"
        assert out.returncode == 0, out.stderr[-2000:]
        said = [ln for ln in out.stderr.splitlines() if "SSPTK_FORK_SERVER" in ln or "fork server" in ln]
        assert len(said) == 1, out.stderr
        if fake == "root":
            assert f"answered with a pid that is not its task (pid {victim.pid} is not a child" in said[0]
        else:
            assert f"SSPTK_FORK_SERVER={path}: " in said[0] and "uid 65534" in said[0]
            assert "this process starts a fork server of its own" in said[0]
            received = [json.loads(ln) for ln in fake_log.read_text().splitlines() if ln.startswith("{")]
            assert received == [], "the launcher sent the other user's server a request"
    finally:
        _stop(server)
        victim.kill()
        victim.wait(10)
    assert_gone(str(tmp_path))


@pytest.mark.parametrize("taken", ["file", "directory", "live"])
def test_listen_on_a_taken_path_is_refused_in_one_line_and_what_is_there_is_kept(taken: str, tmp_path: Path) -> None:
    """``--listen PATH`` deleted a regular file at PATH, and gave a traceback for a directory."""
    path = tmp_path / "fs"
    live = None
    if taken == "file":
        path.write_text("keep me")
    elif taken == "directory":
        path.mkdir()
    else:
        live = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        live.bind(str(path))
        live.listen(1)
    try:
        out = subprocess.run(listening_fork_server(str(path)), env=fork_server_env(PYTHONPATH=str(ROOT)),
                             capture_output=True, text=True, timeout=120)
    finally:
        if live is not None:
            live.close()
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"ssptk worker: error: --listen {path}") and out.stderr.count("\n") == 1, out.stderr
    if taken == "file":
        assert path.read_text() == "keep me" and "is not a socket: it is kept" in out.stderr
    elif taken == "directory":
        assert path.is_dir() and "is a directory" in out.stderr
    else:
        assert path.is_socket() and "a server listens there already" in out.stderr


def test_a_stale_socket_is_replaced(tmp_path: Path) -> None:
    """A socket nobody listens on (a server killed outright leaves it) is replaced by a new server's."""
    path = tmp_path / "fs"
    old = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old.bind(str(path))
    old.close()
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(str(path))  # stale: nobody listens
    server = subprocess.Popen(listening_fork_server(str(path)), env=fork_server_env(PYTHONPATH=str(ROOT)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(str(path) + fork_server.DESCRIPTION, server)
        # the new server's socket (not the inode number: a file system may give the new socket the old one's)
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
            probe.connect(str(path))
    finally:
        _stop(server)
    assert server.returncode == 0 and not path.exists()


def _plain_env(**extra: str) -> dict[str, str]:
    """A plain shell's environment: none of what a launcher adds to its tasks', nor what the test session sets."""
    drop = {"TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "SSPTK_FORK_SERVER", "KMP_INIT_AT_FORK",
            "KMP_DUPLICATE_LIB_OK"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PYTHONPATH": str(ROOT), **extra}


def _reaped_cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.children_user + t.children_system)


def test_a_server_started_as_the_readme_says_is_used_by_ssptk_run(tmp_path: Path) -> None:
    """``python -m ssptk.worker --fork-server --listen PATH`` in a plain shell was never used, silently: a launcher's
    tasks have TF_CPP_MIN_LOG_LEVEL and CUDA_VISIBLE_DEVICES, which the server lacked. Now the server forks the run's
    tasks (their CPU time is reaped by it), says nothing, and its tasks log at the launcher's level (no INFO
    lines: TensorFlow reads that level once, at the server's import)."""
    path = str(tmp_path / "fs")
    server = subprocess.Popen(listening_fork_server(path), env=_plain_env(), cwd="/", stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(path + fork_server.DESCRIPTION, server)
        before = _reaped_cpu(server.pid)
        out = subprocess.run([*ssptk_cmd(), "run", "--mode", "async", "--workers", "2", "--steps", "30", "--out",
                              str(tmp_path / "run")], env=_plain_env(SSPTK_FORK_SERVER=path), cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "fork server" not in out.stderr and "SSPTK_FORK_SERVER" not in out.stderr, out.stderr
        deadline = time.monotonic() + 10
        while _reaped_cpu(server.pid) <= before + 0.1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _reaped_cpu(server.pid) > before + 0.1, "the run's tasks were not forked by the server"
        logs = " ".join(p.read_text() for p in (tmp_path / "run" / "logs").iterdir())
        assert "grpc_server_lib" not in logs, "the tasks log TensorFlow's INFO lines: not the launcher's level"
    finally:
        _stop(server)
    assert_gone(str(tmp_path))


def test_a_server_that_cannot_serve_a_launcher_says_why_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Where the server's settings differ from the tasks', one warning names them, once per process."""
    from ssptk.launch import fork_trust

    path = str(tmp_path / "fs")
    server = subprocess.Popen(listening_fork_server(path), env=_plain_env(), cwd="/", stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(path + fork_server.DESCRIPTION, server)
        tasks = _plain_env(TF_CPP_MIN_LOG_LEVEL="0", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
        assert fork_trust.shared_server(path, tasks) is None
        assert fork_trust.shared_server(path, tasks) is None
        said = [r.getMessage() for r in caplog.records if "SSPTK_FORK_SERVER" in r.getMessage()]
        assert said == [f"ssptk: SSPTK_FORK_SERVER={path}: the server there started with TF_CPP_MIN_LOG_LEVEL '2', "
                        "these tasks have TF_CPP_MIN_LOG_LEVEL '0': start it with the same settings; this process "
                        "starts a fork server of its own"]
        as_a_launcher_gives = _plain_env(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
        found = fork_trust.shared_server(path, as_a_launcher_gives)
        assert found is not None and found[1] == server.pid
        found[0].close()
    finally:
        _stop(server)
