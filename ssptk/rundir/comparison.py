"""The comparison directory: one object that knows every path of it and lists what is there.

``ssptk compare`` / ``ssptk sweep`` / ``ssptk.compare`` / ``ssptk.predict`` write (``docs/run-directory.md``,
"Comparison directories")::

    OUT/<label>/              one run directory per label (ssp:2 -> ssp-2)
    OUT/<label>/rep-<k>/      with repetitions (--repeat R > 1): one per repetition k = 1..R
    OUT/predicted/<label>/    compare --predict: the label's predicted run (the predicting process's log in
                              OUT/predicted/logs/)
    OUT/metrics.csv           the comparison table
    OUT/report.html           the report

Every module that writes or reads a comparison asks a :class:`ComparisonDir` for the path; ``metrics.csv``
is written, and its ``label`` column read, only here. The runs inside are :class:`~ssptk.rundir.RunDir` s.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ssptk.core.errors import UsageError
from ssptk.core.labels import label_dir
from ssptk.core.printable import printable
from ssptk.rundir.contract import MAX_JSON_BYTES, NotRegular, open_regular
from ssptk.rundir.layout import RunDir
from ssptk.rundir.space import write_whole

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ComparisonDir", "LabelRuns", "PREDICTED_DIR", "write_metrics_csv"]

#: Where ``compare --predict`` puts its predicted runs: ``OUT/predicted/<label>/``.
PREDICTED_DIR = "predicted"
_METRICS = "metrics.csv"
_REPORT = "report.html"
_REP = re.compile(r"rep-(\d+)")


def write_metrics_csv(table: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write a comparison table as CSV (no index; missing values empty), whole or not at all; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(str(path), table.to_csv(index=False))
    return path


@dataclass(frozen=True)
class LabelRuns:
    """What a comparison directory holds for one label: ``path``, its directory; ``reps``, the ``rep-<k>`` run
    directories by k (empty when ``path`` is itself the run); ``predicted``, its predicted run, if any."""

    label: str
    path: str
    reps: tuple[str, ...] = ()
    predicted: str | None = None


class ComparisonDir:
    """The paths of one comparison directory (which need not exist yet), and what it holds."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"ComparisonDir({self.path!r})"

    # --- paths ----------------------------------------------------------------------------------
    @property
    def metrics_path(self) -> str:
        """``metrics.csv``: the comparison table (with repetitions, one row per run)."""
        return os.path.join(self.path, _METRICS)

    @property
    def report_path(self) -> str:
        """``report.html``: the self-contained report."""
        return os.path.join(self.path, _REPORT)

    @property
    def predicted_dir(self) -> str:
        """``predicted/``: ``compare --predict``'s predicted runs, and their process's ``logs/``."""
        return os.path.join(self.path, PREDICTED_DIR)

    def label_path(self, label: str) -> str:
        """``<label>/``: the directory of a label (``ssp:2`` -> ``ssp-2``)."""
        return os.path.join(self.path, label_dir(label))

    def run_path(self, label: str, rep: int | None = None) -> str:
        """The run directory of ``label``: ``<label>/``, or with repetitions ``<label>/rep-<rep>/``."""
        return self.label_path(label) if rep is None else os.path.join(self.label_path(label), f"rep-{rep}")

    def predicted_path(self, label: str) -> str:
        """``predicted/<label>/``: the predicted run of ``label``."""
        return os.path.join(self.predicted_dir, label_dir(label))

    # --- what is there --------------------------------------------------------------------------
    def write_metrics(self, table: pd.DataFrame) -> str:
        """Write ``metrics.csv`` (:func:`write_metrics_csv`); returns its path."""
        return str(write_metrics_csv(table, self.metrics_path))

    def listed_labels(self) -> list[str]:
        """The labels in ``metrics.csv``'s ``label`` column, in order; ``[]`` without a readable one."""
        return self.read_listed_labels()[0]

    def read_listed_labels(self) -> tuple[list[str], str]:
        """:meth:`listed_labels`, and why ``metrics.csv`` could not be read (``""``: it could, or there is none).
        Only a regular file of at most :data:`~ssptk.rundir.contract.MAX_JSON_BYTES` is read."""
        import io

        import pandas as pd

        try:
            with open_regular(self.metrics_path) as f:
                data = f.read(MAX_JSON_BYTES + 1)
        except FileNotFoundError:
            return [], ""
        except OSError as e:
            return [], (e.strerror if isinstance(e, NotRegular) else None) or "cannot be read"
        if len(data) > MAX_JSON_BYTES:
            return [], f"larger than {MAX_JSON_BYTES // 2**20} MiB"
        try:
            return [str(x) for x in pd.read_csv(io.BytesIO(data), dtype={"label": str})["label"].dropna()], ""
        except (KeyError, ValueError):  # no label column; not CSV (pandas' ParserError is a ValueError)
            return [], "not a comparison table with a label column"

    @staticmethod
    def reps(path: str | os.PathLike[str]) -> list[str]:
        """The ``rep-<k>`` run directories in a label's directory ``path``, by k (``[]`` if none)."""
        if not os.path.isdir(path):
            return []
        found = [(int(m.group(1)), os.path.join(path, name)) for name in os.listdir(path)
                 if (m := _REP.fullmatch(name)) and RunDir(os.path.join(path, name)).is_run()]
        return [p for _, p in sorted(found)]

    def labels(self) -> list[LabelRuns]:
        """Every label's runs, ordered as ``metrics.csv`` lists them (labels it lacks follow, sorted by their
        directory's name; without one, all sorted so). A label's directory is a run directory, or holds
        ``rep-<k>`` ones. :class:`UsageError` when this is not a directory or holds no run."""
        if not os.path.isdir(self.path):
            raise UsageError(f"{Path(self.path)} is not a directory; pass a comparison output directory")
        names = sorted(name for name in os.listdir(self.path)
                       if RunDir(os.path.join(self.path, name)).is_run() or self.reps(os.path.join(self.path, name)))
        if not names:
            raise UsageError(f"no run directories (with config.json, summary.json or workers/) under {Path(self.path)}")
        by_label = {lab: label_dir(lab) for lab in dict.fromkeys(self.listed_labels()) if label_dir(lab) in names}
        by_label.update({name: name for name in names if name not in by_label.values()})
        out = []
        for label, name in by_label.items():
            path = os.path.join(self.path, name)
            predicted = os.path.join(self.predicted_dir, name)
            out.append(LabelRuns(printable(label), path, () if RunDir(path).is_run() else tuple(self.reps(path)),
                                 predicted if RunDir(predicted).is_run() else None))
        return out

    def run_dirs(self) -> list[str]:
        """Every run directory at any depth in this one (a directory with ``config.json`` or ``workers``),
        sorted: the labels', their repetitions', the predicted runs'."""
        found = []
        for here, _dirs, _files in os.walk(self.path):
            rd = RunDir(here)
            if os.path.lexists(rd.config_path) or os.path.lexists(rd.workers_dir):
                found.append(str(Path(here)))
        return sorted(found)
