"""``ssptk.widgets``: the staleness widgets for Jupyter, as documented (they live in
:mod:`ssptk.notebook.staleness_widgets`): ``staleness_explorer()`` slides over SSP's staleness S,
``staleness_explorer(mode="local", local_steps=(1, 2, 4, 8))`` over local SGD's local steps H;
``sweep(local_steps=...)`` and ``from_runs`` of ``local:H`` runs: a slider over H."""
from __future__ import annotations

from ssptk.notebook.staleness_widgets import Explorer, SweepResult, from_runs, staleness_explorer, sweep

__all__ = ["Explorer", "SweepResult", "from_runs", "staleness_explorer", "sweep"]
