"""The help texts every command's ``--help`` ends with: examples, exit codes, and what ssptk needs of the system."""
from __future__ import annotations

__all__ = ["EXAMPLES", "EXIT_CODES", "NOTEBOOK_EXAMPLES", "PLATFORMS"]

NOTEBOOK_EXAMPLES = """examples:
  %dtrain --model keras --mode ssp --staleness 4 --workers 3 --steps 500 --straggler 2:0.02
  res = %dtrain --mode async --workers 3 --steps 300     (res.df: the step records)
  %dtrain compare sync ssp:2 ssp:8 async --workers 3 --steps 300 --jitter exp:0.02
  %dtrain sweep --staleness 0,1,2,4,8 --workers 3 --steps 300 --straggler 2:0.02
  %dtrain sweep --local-steps 1,2,4,8 --workers 3 --steps 300     (local SGD: a slider over H)
  %%dtrain --model my_model ...     (the cell defines def my_model() -> ssptk.ModelSpec)
"""

EXAMPLES = """examples:
  ssptk run --model linear --mode ssp --staleness 2 --workers 3 --steps 300 --straggler 2:0.02
  ssptk compare sync ssp:2 ssp:8 async --workers 3 --steps 300 --jitter exp:0.02 --out runs/cmp
  ssptk compare sync ssp:4 async --repeat 3 --workers 3 --steps 300 --jitter pause:0.05:0.03
  ssptk sweep --staleness 0,1,2,4,8 --workers 3 --steps 300 --straggler 2:0.02
  ssptk sweep --local-steps 1,2,4,8 --workers 3 --steps 300 --out runs/local
  ssptk report runs/cmp
  ssptk sim --mode ssp --staleness 2 --workers 3 --steps 2000 --jitter exp:0.02
"""


#: What a command's exit code says (``ssptk run --help`` and the other commands' help end with it; :mod:`ssptk.cli`
#: returns them).
EXIT_CODES = ("exit codes: 0 done; 1 a run failed; 2 bad usage; 3 (run, sim --model) the run finished but diverged: "
              "its model is not a trained one (--stop-on-divergence stops it instead, and it fails: 1); compare and "
              "sweep exit 0 when every run finished, diverged or not (divergence is one of their findings), 1 when "
              "one failed; 130, 143, 129: stopped by SIGINT, SIGTERM, SIGHUP.")


#: What ssptk needs of the system, and what each part does without it (the top-level ``ssptk --help``; the docs'
#: platforms page says the same at length).
PLATFORMS = """what ssptk needs: Linux with Python 3.10+ and TensorFlow, as any user (root is not needed).
  - user namespaces (util-linux's unshare, nsenter): each local cluster runs in a private network namespace that
    only it can reach; without them (some containers) it runs unisolated and says so once (SSPTK_NO_NETNS=1 asks).
  - iproute2 (tc, ip; found on PATH, /usr/sbin or /sbin) and the ifb module: --network, and the bytes each task
    sends; a run without --network goes on without them, its traffic "not measured" and why.
  - a cgroup v2 subtree the user may write (root, or one systemd delegates): what a task's code starts is killed
    with it; otherwise it is followed through /proc, and config.json's tasks.tracking says which.
"""
