"""``python -m ssptk.worker``: the command every task of a cluster runs (see :mod:`ssptk.runtime.task`)."""
from __future__ import annotations

import sys

from ssptk.runtime.task import task_main

if __name__ == "__main__":
    sys.exit(task_main())
