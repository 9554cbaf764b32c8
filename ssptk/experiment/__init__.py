"""Experiments: one run (:mod:`~ssptk.experiment.single`), comparisons of modes, staleness sweeps, and
what a run leaves behind when it ends (:mod:`~ssptk.experiment.finish`).

The last layer below the front ends (CONTRIBUTING.md has their order): it composes the launcher
(:mod:`ssptk.launch`), the run directory, analysis and rendering (reports). Front ends (:mod:`ssptk.api`,
:mod:`ssptk.cli`, :mod:`ssptk.notebook`) import it; it imports none of them.
"""
