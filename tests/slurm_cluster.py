"""A real two-node Slurm cluster on this one host, for tests/test_slurm_real.py.

Debian's ``slurm-wlm`` (22.05) and ``munge``, started by hand as root (no systemd): ``munged`` with its own key
and socket, ``slurmctld`` and one ``slurmd`` per node. TensorFlow servers listen on every interface and the
recipe's ports are ``port base + the task's index on its node``, so two emulated nodes on one host must not share
a network stack: each ``slurmd`` runs in its own network namespace (``ip netns``, a veth into a bridge in the host's
namespace, where ``slurmctld`` listens) and its own UTS namespace (``hostname`` says the node's name, as the recipe's
``--out "$0/$(hostname)"`` expects). ``ip netns exec`` bind-mounts ``/etc/netns/<ns>/hosts`` over ``/etc/hosts``, which
is how the tasks resolve the node names TensorFlow's SlurmClusterResolver gives them. Everything lives under one
directory; :meth:`SlurmCluster.stop` ends every daemon and job process it started and removes the namespaces.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Any

__all__ = ["SlurmCluster", "missing_tools", "NODES"]

NODES = ("sn1", "sn2")
_PREFIX = "10.87.0"
_CTL = ("sctl", f"{_PREFIX}.254")
_BRIDGE = "ssptkbr0"
_TOOLS = ("slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "scancel", "munged", "ip", "unshare", "nsenter")
#: processes a stopped cluster must not leave (by executable name)
DAEMONS = ("slurmctld", "slurmd", "slurmstepd", "munged")


def missing_tools() -> list[str]:
    """What this host lacks to run the cluster (empty when it can): Slurm's and munge's programs, root."""
    missing = [t for t in _TOOLS if shutil.which(t) is None and not os.path.exists(f"/usr/sbin/{t}")]
    if os.geteuid() != 0:
        missing.append("root (slurmd and network namespaces need it)")
    return missing


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=60)


_CONF = """\
ClusterName=ssptk
SlurmctldHost={ctl}({ctl_addr})
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={base}/munge/munge.socket
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool/%n
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd-%n.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
{nodes}
PartitionName=test Nodes={nodelist} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


class SlurmCluster:
    """Two Slurm nodes (:data:`NODES`) and a controller on this host, all under ``base``."""

    def __init__(self, base: str, cpus: int = 24) -> None:
        self.base = os.path.abspath(base)
        self.cpus = cpus
        self.conf = os.path.join(self.base, "slurm.conf")
        self.hosts = os.path.join(self.base, "hosts")  # the nodes' /etc/hosts (bind-mounted in their namespaces)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = dict(os.environ, SLURM_CONF=self.conf)

    # -- start --------------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> None:
        for d in ("munge", "state", "log", "spool", *(f"spool/{n}" for n in NODES)):
            os.makedirs(os.path.join(self.base, d), exist_ok=True)
        self._network()
        nodes = "\n".join(f"NodeName={n} NodeAddr={_PREFIX}.{i + 1} CPUs={self.cpus} RealMemory=4000 State=UNKNOWN"
                          for i, n in enumerate(NODES))
        with open(self.conf, "w") as f:
            f.write(_CONF.format(base=self.base, ctl=_CTL[0], ctl_addr=_CTL[1], nodes=nodes,
                                 nodelist=",".join(NODES)))
        self._munge()
        self._spawn(["unshare", "--uts", "sh", "-c", f'hostname {_CTL[0]} && exec slurmctld -D -i -f "$0"', self.conf],
                    "slurmctld")
        for n in NODES:
            # nsenter, not `ip netns exec`: that remounts /sys, hiding the cgroup file systems slurmd needs
            self._spawn(["nsenter", f"--net=/run/netns/ssptk-{n}", "unshare", "--uts", "--mount", "sh", "-c",
                         f'mount --bind "$1" /etc/hosts && hostname {n} && exec slurmd -D -N {n} -f "$0"',
                         self.conf, self.hosts], f"slurmd-{n}")
        self._wait_idle(timeout)

    def _network(self) -> None:
        self._teardown_network()
        _sh("ip", "link", "add", _BRIDGE, "type", "bridge")
        _sh("ip", "addr", "add", f"{_CTL[1]}/24", "dev", _BRIDGE)
        _sh("ip", "link", "set", _BRIDGE, "up")
        hosts = "127.0.0.1 localhost\n" + f"{_CTL[1]} {_CTL[0]}\n" + "".join(
            f"{_PREFIX}.{i + 1} {n}\n" for i, n in enumerate(NODES))
        for i, n in enumerate(NODES):
            ns, veth = f"ssptk-{n}", f"ssptkv{i}"
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "link", "set", veth, "master", _BRIDGE, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{_PREFIX}.{i + 1}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        with open(self.hosts, "w") as f:
            f.write(hosts)

    def _munge(self) -> None:
        key = os.path.join(self.base, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        m = os.path.join(self.base, "munge")
        os.chmod(m, 0o700)
        self._spawn(["munged", "-F", "--force", f"--key-file={key}", f"--socket={m}/munge.socket",
                     f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"],
                    "munged")
        deadline = time.monotonic() + 15
        while not os.path.exists(f"{m}/munge.socket"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start: {self._log('munged')}")
            time.sleep(0.1)

    def _spawn(self, argv: list[str], name: str) -> None:
        out = open(os.path.join(self.base, "log", f"{name}.out"), "wb")
        self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                           start_new_session=True))
        out.close()

    def _log(self, name: str) -> str:
        path = os.path.join(self.base, "log", f"{name}.out")
        try:
            with open(path, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return "(no log)"

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=self.env)
            out = r.stdout + r.stderr
            states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
            if all(states.get(n) == "idle" for n in NODES):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Slurm nodes did not come up: sinfo says {out!r}\n"
                           + "\n".join(self._log(n) for n in ("slurmctld", *(f"slurmd-{x}" for x in NODES))))

    # -- use ----------------------------------------------------------------------------------------
    def sbatch(self, script: str, cwd: str, *options: str, env: dict[str, str] | None = None) -> int:
        """Submit ``script`` from ``cwd``; the job's id."""
        r = subprocess.run(["sbatch", "--parsable", *options, script], cwd=cwd, capture_output=True, text=True,
                           env=dict(self.env, **(env or {})), timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed: {r.stderr.strip()}")
        return int(r.stdout.strip().split(";")[0])

    def job_state(self, job: int) -> str:
        """The job's state (``PENDING``, ``RUNNING``, ``COMPLETED``, ``CANCELLED``, ``FAILED``, ...)."""
        r = subprocess.run(["scontrol", "show", "job", str(job), "-o"], capture_output=True, text=True, env=self.env)
        for word in r.stdout.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return "UNKNOWN"

    def wait(self, job: int, timeout: float) -> str:
        """Wait until the job has ended; its final state."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.job_state(job)
            if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
                return state
            time.sleep(0.5)
        raise TimeoutError(f"job {job} still {self.job_state(job)} after {timeout:.0f} s")

    def scancel(self, job: int, *options: str) -> None:
        subprocess.run(["scancel", *options, str(job)], check=True, env=self.env, timeout=30)

    # -- stop ---------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel every job, end the daemons (and whatever they left), remove the namespaces."""
        subprocess.run(["scancel", "--full", "--partition=test"], capture_output=True, env=self.env, timeout=30)
        for p in reversed(self.procs):  # slurmds first, then slurmctld, munged last
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        for pid in self.leftovers():  # job steps' processes outlive slurmd when it is stopped
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._teardown_network()

    def leftovers(self) -> list[int]:
        """Processes of this cluster still there: its daemons, whatever runs in its nodes' network namespaces, and
        every process of its jobs (their environment names this cluster's ``SLURM_CONF``)."""
        found = []
        ns_inodes = self._ns_inodes()
        for pid in _pids():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                net = os.readlink(f"/proc/{pid}/ns/net")
            except OSError:
                continue
            exe = os.path.basename(cmd.split(" ", 1)[0])
            if (exe in DAEMONS and self.base in cmd) or net in ns_inodes or self._environ_has(pid, self.conf):
                found.append(pid)
        return found

    def task_pid(self, job: int, rank: int) -> int | None:
        """The process of task ``rank`` (``SLURM_PROCID``) of ``job``'s ssptk step, if it runs."""
        for pid in _pids():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
            except OSError:
                continue
            if b"worker" in cmd and b"--cluster" in cmd and self._environ_has(pid, f"SLURM_JOB_ID={job}") \
                    and self._environ_has(pid, f"SLURM_PROCID={rank}"):
                return pid
        return None

    @staticmethod
    def _environ_has(pid: int, entry: str) -> bool:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            return False
        if "=" in entry and not entry.startswith("/"):
            return entry.encode() in env
        return any(entry.encode() in e for e in env)

    def _ns_inodes(self) -> set[str]:
        inodes = set()
        for n in NODES:
            path = f"/run/netns/ssptk-{n}"
            if os.path.exists(path):
                inodes.add(f"net:[{os.stat(path).st_ino}]")
        return inodes

    def _teardown_network(self) -> None:
        for i, n in enumerate(NODES):
            _sh("ip", "netns", "del", f"ssptk-{n}", check=False)
            _sh("ip", "link", "del", f"ssptkv{i}", check=False)
        _sh("ip", "link", "del", _BRIDGE, check=False)

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) != os.getpid()]
