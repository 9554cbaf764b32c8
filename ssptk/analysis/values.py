"""Plain values for summaries and tables (JSON-ready numbers)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["clean"]


def clean(value: Any) -> Any:
    """numpy scalars -> Python scalars; NaN / infinities -> None (summaries must be plain JSON)."""
    if value is None:
        return None
    if isinstance(value, (np.integer, int)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    return value
