"""An ordinary user is a first-class user (issue 41): no root, Debian's default PATH (no ``/usr/sbin``, no ``/sbin``),
with or without iproute2.

Runs that shape nothing never fail for want of ``tc``: their traffic is "not measured", saying why, once. ``tc`` and
``ip`` are found in ``/usr/sbin`` when PATH lacks it; ``--network`` without them is refused in one line before any
process starts. The /proc way of following what tasks start is recorded in config.json, not printed first in every
run. The user tests run as a real second user made by ``.ci/ordinary-user`` (its own venv, its own ``pip install``),
as root switches to it; a non-root suite is that user itself.
"""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import ROOT, assert_gone, has_tc, skip_or_fail, ssptk_cmd, traffic_here

import ssptk
from ssptk.core.errors import UsageError
from ssptk.launch import tools, tracking

DEBIAN_PATH = "/usr/local/bin:/usr/bin:/bin"
SMALL = ["run", "--model", "linear", "--workers", "2", "--steps", "15"]
ROOT_USER = os.geteuid() == 0


def readme_main_job() -> list[str]:
    """The README's first command after ``pip install . &&``, word for word."""
    text = (ROOT / "README.md").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("pip install . && ssptk "))
    return line.split(" && ", 1)[1].split()[1:]


# --- any user: the lookup, and a run without tc ----------------------------------------------------------------


def test_tc_and_ip_are_found_where_the_system_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", DEBIAN_PATH)
    if not os.path.exists("/usr/sbin/tc"):
        skip_or_fail("iproute2's tc is not in /usr/sbin on this machine (apt-get install iproute2)")
    assert shutil.which("tc") is None, "the PATH of this test must not hold tc"
    assert tools.find("tc") in ("/usr/sbin/tc", "/sbin/tc")
    assert tools.find("ip") is not None and os.path.isabs(tools.find("ip") or "")  # Debian has it in /bin too


def test_a_run_without_tc_goes_on_and_says_its_traffic_was_not_measured(
        monkeypatch: pytest.MonkeyPatch, run_dir: Path) -> None:
    monkeypatch.setenv("PATH", DEBIAN_PATH)
    monkeypatch.setattr(tools, "SYSTEM_DIRS", ())  # as where iproute2 is not installed
    result = ssptk.run(model="linear", mode="async", workers=2, steps=15, out=str(run_dir))
    config = json.loads((run_dir / "config.json").read_text())
    if config["tasks"]["isolation"] != "netns":
        skip_or_fail(f"no private network namespace here ({config['tasks']['isolation']}): the links need one")
    assert config["tasks"]["traffic"] == "not measured (tc is not on PATH, in /usr/sbin or /sbin; package iproute2 " \
                                         "has it)"
    assert result.summary["status"] == "ok" and "traffic" not in result.summary
    assert result.summary["traffic_not_measured"].startswith("tc is not on PATH")
    shown = [ln for ln in str(result).splitlines() if "traffic" in ln]
    assert shown == ["network   traffic not measured: tc is not on PATH, in /usr/sbin or /sbin; package iproute2 has "
                     "it"], str(result)
    assert not (run_dir / "traffic.json").exists()


def test_network_without_tc_is_refused_in_one_line_before_anything_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", DEBIAN_PATH)
    monkeypatch.setattr(tools, "SYSTEM_DIRS", ())
    out = tmp_path / "never"
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(UsageError, match=r"^--network 20mbit needs the command 'tc', which is neither on PATH nor in "
                                         r"/usr/sbin or /sbin: install iproute2 \(e\.g\. sudo apt-get install "
                                         r"iproute2\)$"):
        ssptk.run(model="linear", workers=2, steps=5, network="20mbit", out=str(out))
    assert not out.exists()
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_the_proc_way_is_recorded_in_the_run_and_noted_once_not_warned(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, run_dir: Path) -> None:
    monkeypatch.setattr(tracking, "_state", type(tracking._state)())
    monkeypatch.setattr(tracking, "_own_cgroup", _no_cgroup)
    with caplog.at_level("INFO", logger="ssptk"):
        ssptk.run(model="linear", mode="async", workers=2, steps=5, out=str(run_dir))
    config = json.loads((run_dir / "config.json").read_text())
    assert config["tasks"]["tracking"] == "none (cgroup2 is not mounted)"
    said = [r for r in caplog.records if "no cgroup" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "INFO", [(r.levelname, r.getMessage()) for r in said]


def _no_cgroup() -> str:
    raise OSError("cgroup2 is not mounted")


# --- a real ordinary user -----------------------------------------------------------------------------------------


class User:
    """Runs commands as the ordinary user, with Debian's default PATH and its own venv's ``ssptk`` first."""

    def __init__(self) -> None:
        if ROOT_USER:
            name, python = os.environ.get("SSPTK_TEST_USER"), os.environ.get("SSPTK_TEST_USER_PYTHON")
            if not name or not python or not os.path.exists(python):
                skip_or_fail("no ordinary user to run as: run `eval $(sudo .ci/ordinary-user)` first (.ci/run does), "
                             "which makes one with its own venv and sets SSPTK_TEST_USER and SSPTK_TEST_USER_PYTHON")
            self.pw = pwd.getpwnam(name)
            self.python = python
        else:  # this suite's user is the ordinary user
            self.pw = pwd.getpwuid(os.getuid())
            self.python = sys.executable
        self.bin = os.path.dirname(self.python)

    def env(self, **extra: str) -> dict[str, str]:
        env = {"HOME": self.pw.pw_dir, "USER": self.pw.pw_name, "LOGNAME": self.pw.pw_name, "LANG": "C.UTF-8",
               "PATH": f"{self.bin}:{DEBIAN_PATH}", **extra}
        if not ROOT_USER:  # this very checkout, as the suite's own python imports it
            env["PYTHONPATH"] = str(ROOT)
        return env

    def argv(self, argv: list[str], hide_sbin: bool = False) -> list[str]:
        if ROOT_USER:
            argv = ["setpriv", f"--reuid={self.pw.pw_uid}", f"--regid={self.pw.pw_gid}", "--init-groups", *argv]
        if hide_sbin:  # as on a machine without iproute2: /usr/sbin (and /sbin) empty, in this command's mounts only
            if not ROOT_USER:
                pytest.skip("hiding /usr/sbin from one command needs root (a mount namespace of its own)")
            hide = "mount -t tmpfs none /usr/sbin && { [ -L /sbin ] || mount -t tmpfs none /sbin; }"
            argv = ["unshare", "-m", "sh", "-c", f'{hide} && exec "$@"', "sh", *argv]
        return argv

    def run(self, argv: list[str], cwd: Path, hide_sbin: bool = False, timeout: float = 300,
            **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(argv, hide_sbin), cwd=cwd, env=self.env(**env), capture_output=True,
                              text=True, timeout=timeout, check=False)

    def ssptk(self, args: list[str], cwd: Path, hide_sbin: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
        command = [os.path.join(self.bin, "ssptk")] if ROOT_USER else ssptk_cmd()
        return self.run([*command, *args], cwd, hide_sbin, **env)

    def processes(self) -> list[psutil.Process]:
        """This user's ssptk processes (the tasks of its runs, its fork servers)."""
        mine = []
        for p in psutil.process_iter(["uids", "cmdline", "status"]):
            if p.info["uids"] and p.info["uids"].real == self.pw.pw_uid and p.info["status"] != psutil.STATUS_ZOMBIE \
                    and "ssptk" in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid():
                mine.append(p)
        return mine


@pytest.fixture(scope="module")
def user() -> User:
    return User()


@pytest.fixture
def home(user: User) -> Iterator[Path]:
    """A fresh directory of the user's own, in its home; afterwards none of its runs' processes may be left."""
    path = Path(tempfile.mkdtemp(prefix="ssptk-test-", dir=user.pw.pw_dir if ROOT_USER else None))
    os.chown(path, user.pw.pw_uid, user.pw.pw_gid)
    try:
        yield path
        assert_gone(str(path), within=10)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _config(out: Path) -> dict:
    return json.loads(next(out.rglob("config.json")).read_text())


def _first_line(text: str) -> str:
    return next((ln for ln in text.splitlines() if ln.strip()), "")


def test_the_main_job_runs_for_an_ordinary_user_and_its_table_comes_first(user: User, home: Path) -> None:
    out = user.ssptk([*readme_main_job(), "--out", "cmp"], home)
    assert out.returncode == 0, out.stdout + out.stderr
    assert _first_line(out.stdout).startswith("run "), out.stdout  # the table, not a line about the system
    assert "cgroup" not in out.stdout + out.stderr and "ssptk:" not in out.stderr, out.stderr
    assert re.search(r"^report: cmp/report\.html$", out.stdout, re.M), out.stdout
    config = _config(home / "cmp")
    assert config["tasks"]["traffic"] == traffic_here() and config["tasks"]["isolation"] == "netns", config["tasks"]
    assert config["tasks"]["tracking"] == "cgroup" or config["tasks"]["tracking"].startswith("none (cannot make a ")


def test_the_main_job_runs_where_iproute2_is_missing(user: User, home: Path) -> None:
    out = user.ssptk([*readme_main_job(), "--out", "cmp"], home, hide_sbin=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert _first_line(out.stdout).startswith("run "), out.stdout
    said = [ln for ln in out.stdout.splitlines() if "not measured" in ln]
    assert said == ["Traffic not measured (sync, ssp:4, async): tc is not on PATH, in /usr/sbin or /sbin; package "
                    "iproute2 has it."], out.stdout
    assert "MB/step" not in out.stdout and "--network" not in out.stdout + out.stderr
    assert _config(home / "cmp")["tasks"]["traffic"].startswith("not measured (tc is not on PATH")
    report = (home / "cmp" / "report.html").read_text()
    assert report.count("traffic not measured: tc is not on PATH") == 3


def test_network_runs_for_an_ordinary_user_and_without_iproute2_is_refused_first(user: User, home: Path) -> None:
    if has_tc():
        out = user.ssptk([*SMALL, "--mode", "async", "--network", "20mbit", "--out", "shaped"], home)
        assert out.returncode == 0, out.stdout + out.stderr
        traffic = json.loads((home / "shaped" / "traffic.json").read_text())
        assert traffic["network"] == "20mbit" and traffic["tasks"]["ps:0"]["sent"] > 0
    # without iproute2: this machine's, or hidden from this one command
    refused = user.ssptk([*SMALL, "--network", "20mbit", "--out", "never"], home, hide_sbin=has_tc())
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == ["ssptk: error: --network 20mbit needs the command 'tc', which is neither on "
                                           "PATH nor in /usr/sbin or /sbin: install iproute2 (e.g. sudo apt-get "
                                           "install iproute2)"]
    assert not (home / "never").exists()


def test_the_main_job_runs_without_network_namespaces(user: User, home: Path) -> None:
    out = user.ssptk([*readme_main_job(), "--out", "cmp"], home, SSPTK_NO_NETNS="1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert _config(home / "cmp")["tasks"]["isolation"] == "none (SSPTK_NO_NETNS=1)"
    assert [ln for ln in out.stdout.splitlines() if "not measured" in ln] == [
        "Traffic not measured (sync, ssp:4, async): no private network namespace: its links count the bytes."]
    assert out.stderr.count("SSPTK_NO_NETNS=1") == 1, out.stderr  # the warning asked for, said once


def test_dtrain_runs_in_a_kernel_of_an_ordinary_user(user: User, home: Path) -> None:
    script = """
import nbformat
from nbclient import NotebookClient
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%load_ext ssptk"),
    nbformat.v4.new_code_cell("res = %dtrain --model linear --mode ssp --staleness 2 --workers 2 --steps 20\\n"
                              "print('STATUS', res.summary['status'], res.summary.get('traffic') is not None)")])
NotebookClient(nb, timeout=300, kernel_name="python3").execute()
print("".join(o.get("text", "") for o in nb.cells[1].outputs if o.get("output_type") == "stream"))
"""
    out = user.run([user.python, "-c", script], home)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"STATUS ok {has_tc()}" in out.stdout, out.stdout[-3000:]  # traffic measured where tc is
    deadline = time.monotonic() + 10
    while user.processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in user.processes() if str(home) in " ".join(p.cmdline())], "the kernel's tasks are left"


def test_a_cgroup_delegated_to_the_user_follows_its_tasks(user: User, home: Path) -> None:
    """As systemd delegates ``user@UID.service``: a cgroup owned by the user, the launcher in it."""
    if not ROOT_USER:
        pytest.skip("making a cgroup for another user needs root")
    try:
        base = tracking._own_cgroup()
    except OSError as e:
        skip_or_fail(f"no cgroup v2 hierarchy here: {e}")
    delegated = Path(base) / f"ssptk-test-user-{os.getpid()}"
    delegated.mkdir()
    try:
        for f in (delegated, *(delegated / n for n in ("cgroup.procs", "cgroup.threads", "cgroup.subtree_control"))):
            os.chown(f, user.pw.pw_uid, user.pw.pw_gid)
        move = f'echo $$ > {delegated}/cgroup.procs && exec "$@"'
        out = subprocess.run(["sh", "-c", move, "sh", *user.argv([os.path.join(user.bin, "ssptk"), *SMALL,
                                                                   "--out", "run"])],
                             cwd=home, env=user.env(), capture_output=True, text=True, timeout=300, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        assert _config(home / "run")["tasks"]["tracking"] == "cgroup"
        assert not [d for d in delegated.iterdir() if d.is_dir()], "the tasks' cgroups are removed after the run"
    finally:
        for d in sorted((p for p in delegated.rglob("*") if p.is_dir()), reverse=True):
            d.rmdir()
        delegated.rmdir()


def test_tasks_forked_by_a_plain_shells_server_show_their_whole_command_line(user: User, home: Path) -> None:
    """A fork server started from an ordinary user's plain shell (a short environment) gave its tasks titles cut at
    its own argv and environ (283 of 470 characters): ps, and the tests that find a run's tasks by its --out, saw
    none of them."""
    socket_path = str(home / "fs")
    server = subprocess.Popen(user.argv([user.python, "-m", "ssptk.worker", "--fork-server", "--listen", socket_path]),
                              cwd=home, env=user.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(socket_path + ".server") and time.monotonic() < deadline:
            time.sleep(0.05)
        command = [os.path.join(user.bin, "ssptk")] if ROOT_USER else ssptk_cmd()
        run = subprocess.Popen(user.argv([*command, *SMALL[:-1], "400", "--out", str(home / "run")]), cwd=home,
                               env=user.env(SSPTK_FORK_SERVER=socket_path), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        titles: list[str] = []
        while run.poll() is None and len(titles) < 3:  # a child just forked still shows the server's own title
            titles = [t for t in (" ".join(c.cmdline()) for c in psutil.Process(server.pid).children()
                                  if c.status() != psutil.STATUS_ZOMBIE) if "--fork-server" not in t]
            time.sleep(0.05)
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, out + err
        assert len(titles) == 3, f"the run's three tasks were never seen forked by the server: {titles}"
        assert all(t.startswith(user.python) and t.endswith(f"--out {home / 'run'} --restart-failed 0 --stall-timeout "
                                                            "60") for t in titles), titles
    finally:
        server.terminate()
        server.wait(30)
