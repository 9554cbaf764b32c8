"""Repeated runs of a comparison (``--repeat R``): one row per run, and the spread per label.

Pure functions to pandas, built on :func:`ssptk.analysis.comparison_table.compare_table`.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.comparison_table import (
    COMPARE_COLUMNS,
    FIGURE_COLUMNS,
    SPREAD_SUFFIXES,
    compare_table,
    converged,
    first_to_target,
)
from ssptk.analysis.outcomes import run_counts
from ssptk.analysis.values import clean
from ssptk.analysis.verdict import comparison_verdict

__all__ = ["aggregate_repeats", "ci95_halfwidth", "repeat_table", "t975"]


# Student's t 0.975 quantiles for 1..30 degrees of freedom (scipy.stats.t.ppf(0.975, df), 6 decimals).
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
         2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
         2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)


def t975(df: int) -> float:
    """Student's t 0.975 quantile with ``df`` degrees of freedom (table to 30, then the Cornish-Fisher
    expansion, within 2e-6)."""
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959963984540054
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def ci95_halfwidth(values: Iterable[Any]) -> float | None:
    """Half-width of the t-based 95% confidence interval of the mean of ``values`` (missing values
    left out): ``t(0.975, n-1) * sd / sqrt(n)`` with the sample standard deviation; None for n < 2."""
    x = pd.to_numeric(pd.Series(list(values), dtype="object"), errors="coerce").dropna().astype("float64")
    x = x[np.isfinite(x)]
    if len(x) < 2:
        return None
    return clean(t975(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x)))


def repeat_table(
    runs: Mapping[str, Iterable[tuple[pd.DataFrame, pd.DataFrame, Mapping[str, Any], Mapping[str, Any]]]],
    target: float | None = None,
) -> pd.DataFrame:
    """One row per run of ``label -> [(steps, events, config, summary), ...]`` (a label's repetitions,
    in order): ``label``, ``rep`` (1-based), then the rest of :data:`COMPARE_COLUMNS`.

    As :func:`compare_table` over every repetition of every label, so the automatic target (in
    ``attrs``) is one for all of them.
    """
    keys: list[tuple[str, int]] = []
    flat: dict[str, Any] = {}
    for label, reps in runs.items():
        for k, run in enumerate(reps, 1):
            keys.append((str(label), k))
            flat[f"{label}\x00{k}"] = run  # unique keys; the label is put back below
    table = compare_table(flat, target)
    table["label"] = [label for label, _ in keys]
    table.insert(1, "rep", pd.Series([k for _, k in keys], dtype="Int64", index=table.index))
    table.attrs["first_to_target"] = first_to_target(table)
    table.attrs.pop("verdict", None)  # one row per run is no comparison: the aggregate's verdict is
    return table


def aggregate_repeats(runs_table: pd.DataFrame) -> pd.DataFrame:
    """One row per label of a :func:`repeat_table` (labels in order of first appearance).

    Columns: :data:`COMPARE_COLUMNS`, each of :data:`FIGURE_COLUMNS` the mean over the label's
    repetitions; ``repeats`` (how many); then for each figure ``<figure>_min``, ``<figure>_max`` and
    ``<figure>_ci95`` (half-width of the t-based 95% confidence interval of the mean,
    :func:`ci95_halfwidth`; missing for fewer than two values). Figures come from the label's converged
    repetitions (ok, not diverged) when it has any (a failed run's numbers describe a run cut short), else
    from all of them; missing values are left out. ``diverged``: whether any repetition diverged.
    ``status`` is the repetitions' status when they agree, else ``"<ok>/<n> ok"``. ``attrs`` (the target)
    are kept; ``first_to_target`` is the label with the least mean time to target; ``counts``: label -> how its
    runs ended (:func:`ssptk.analysis.outcomes.run_counts`); ``verdict``: the comparison's
    (:func:`ssptk.analysis.verdict.comparison_verdict`).
    """
    rows: list[dict[str, Any]] = []
    for label, group in runs_table.groupby("label", sort=False):
        statuses = group["status"].tolist()
        ok = group[[converged(r) for r in group.to_dict("records")]]
        used = ok if len(ok) else group
        first = group.iloc[0]
        # held-out only when every run that diverged did so on the held-out loss; any on the training loss says that
        on = sorted({v for v in group["diverged_on"] if isinstance(v, str)}, key=lambda v: v != "training") \
            if "diverged_on" in group else []
        row: dict[str, Any] = {"label": label, "diverged": bool(group["diverged"].any()), "mode": first["mode"],
                               "bound": first["bound"], "workers": first["workers"],
                               "lr_staleness": first.get("lr_staleness"),
                               "diverged_on": on[0] if on else None}
        spread: dict[str, Any] = {}
        for col in FIGURE_COLUMNS:
            values = pd.to_numeric(used[col], errors="coerce").astype("float64").dropna()
            row[col] = float(values.mean()) if len(values) else None
            spread[f"{col}_min"] = values.min() if len(values) else None
            spread[f"{col}_max"] = values.max() if len(values) else None
            spread[f"{col}_ci95"] = ci95_halfwidth(values)
        n_ok = statuses.count("ok")
        row["status"] = statuses[0] if len(set(statuses)) == 1 else f"{n_ok}/{len(statuses)} ok"
        row["repeats"] = len(group)
        rows.append({**row, **spread})
    spread_cols = [f"{c}{s}" for c in FIGURE_COLUMNS for s in SPREAD_SUFFIXES]
    table = pd.DataFrame(rows, columns=[*COMPARE_COLUMNS, "repeats", *spread_cols])
    for col in ("bound", "workers", "repeats"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("Int64")
    integral = {"steps_to_target", "max_skew", "max_staleness"}
    for col in FIGURE_COLUMNS:
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("float64")
        for suffix in SPREAD_SUFFIXES:
            kind = "Int64" if col in integral and suffix != "_ci95" else "float64"
            table[f"{col}{suffix}"] = pd.to_numeric(table[f"{col}{suffix}"], errors="coerce").astype(kind)
    table["diverged"] = table["diverged"].astype(bool)
    table.attrs.update(runs_table.attrs)
    # how many of each label's runs reached the target (a mean time hides the ones that did not)
    table.attrs["reached"] = {str(k): int(v) for k, v in
                              runs_table.groupby("label", sort=False)["time_to_target_s"].count().items()}
    table.attrs["counts"] = run_counts(runs_table)  # how each label's runs ended: the verdict weighs every one
    table.attrs["first_to_target"] = first_to_target(table)
    table.attrs["verdict"] = comparison_verdict(table)
    return table
