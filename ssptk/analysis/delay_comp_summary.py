"""What delay compensation (``--lr-staleness dc`` / ``dca``) did in a run: how large its correction was against the
gradient, from the step records' ``dc_correction`` (``|lambda g*g*(w_now - w_read)| / |g|`` of each update)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.values import clean

__all__ = ["dc_correction_summary"]


def dc_correction_summary(steps: pd.DataFrame | None) -> dict[str, Any]:
    """``dc_correction_mean``, ``dc_correction_median`` and ``dc_correction_max``: the correction's size relative to
    the gradient over the run's applied updates (finite values: a diverged run's infinite ones say nothing more);
    ``None`` for a run without delay compensation (no ``dc_correction`` in its records)."""
    none: dict[str, Any] = {"dc_correction_mean": None, "dc_correction_median": None, "dc_correction_max": None}
    if steps is None or "dc_correction" not in steps:
        return none
    values = pd.to_numeric(steps["dc_correction"], errors="coerce")
    if "applied" in steps:
        values = values[steps["applied"].fillna(True).astype(bool)]
    values = values[np.isfinite(values.to_numpy(dtype="float64"))]
    if values.empty:
        return none
    return {"dc_correction_mean": clean(float(values.mean())), "dc_correction_median": clean(float(values.median())),
            "dc_correction_max": clean(float(values.max()))}
