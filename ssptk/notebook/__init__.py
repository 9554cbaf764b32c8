"""The notebook front end: the ``%dtrain`` / ``%%dtrain`` magics, the live dashboard, background runs and the
staleness widgets.

:mod:`~ssptk.notebook.magics` hands a magic's line to the CLI's own parser and the work to :mod:`ssptk.api`;
:mod:`~ssptk.notebook.dashboard` (with :mod:`~ssptk.notebook.live_state` and :mod:`~ssptk.notebook.live_figure`)
draws a run while it goes on; :mod:`~ssptk.notebook.background` runs one without blocking the kernel;
:mod:`~ssptk.notebook.staleness_widgets` holds the sliders (``ssptk.widgets`` is their documented name; the explorer's
widget is :mod:`~ssptk.notebook.explorer`'s). ``%load_ext ssptk``
loads it through :mod:`ssptk`. Importing the package imports none of its modules (ipywidgets and IPython are
imported only where they are used).
"""
