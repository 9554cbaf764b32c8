"""Experiments: one run (:mod:`~ssptk.experiment.single`), comparisons of modes, staleness sweeps, and
what a run leaves behind when it ends (:mod:`~ssptk.experiment.finish`).

Layer 6, the last below the front ends: it composes the launcher (:mod:`ssptk.launch`), the run directory,
analysis and rendering (reports). Front ends (:mod:`ssptk.api`, :mod:`ssptk.cli`, :mod:`ssptk.notebook`)
import it; it imports none of them.
"""
