"""The simulator: a discrete-event model of the training modes, with the engine's own delay streams.

Beside :mod:`ssptk.rundir` (CONTRIBUTING.md has the layers): pure functions, no TensorFlow, no plotting. May
import :mod:`ssptk.core` only; analysis (measured / ideal), the task runtime (predicted runs), experiments and
the front ends import it.
"""
from __future__ import annotations

from ssptk.sim.calibrate import calibrate_gap, calibrate_overhead
from ssptk.sim.schedule import COLUMNS
from ssptk.sim.simulator import SimResult, expected_sync_update_time, harmonic, ideal_for, simulate, simulate_spec
from ssptk.sim.spec import SimSpec

__all__ = ["COLUMNS", "SimResult", "SimSpec", "calibrate_gap", "calibrate_overhead", "expected_sync_update_time",
           "harmonic", "ideal_for", "simulate", "simulate_spec"]
