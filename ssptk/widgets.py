"""``ssptk.widgets``: the staleness widgets for Jupyter, as documented (they live in :mod:`ssptk.notebook.widgets`)."""
from __future__ import annotations

from ssptk.notebook.widgets import Explorer, SweepResult, from_runs, staleness_explorer, sweep

__all__ = ["Explorer", "SweepResult", "from_runs", "staleness_explorer", "sweep"]
