"""The Python API in one place: what ``import ssptk`` offers, and the names notebooks and scripts use.

A façade: the work is in :mod:`ssptk.experiment` (runs, comparisons, sweeps), whose functions are
re-exported here unchanged.
"""
from __future__ import annotations

from ssptk.experiment.compare import CompareResult, compare, parse_labels
from ssptk.experiment.compare import predict_comparison as predict
from ssptk.experiment.implicit import ImplicitMomentum, implicit_momentum
from ssptk.experiment.predicted_runs import simulate_timing as simulate
from ssptk.experiment.result import RunResult
from ssptk.experiment.single import check_before_start, new_run_dir, run, shutdown
from ssptk.experiment.sweep import sweep_runs as sweep
from ssptk.launch.observers import RunObserver

__all__ = ["CompareResult", "ImplicitMomentum", "RunObserver", "RunResult", "check_before_start", "compare",
           "implicit_momentum", "new_run_dir", "parse_labels", "predict", "run", "shutdown", "simulate", "sweep"]
