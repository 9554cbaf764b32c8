"""Issue 37, "figures that stay readable at scale": every figure of the report and of the live views, with 2, 7 and
12 settings and with 3, 8 and 32 workers, drawn at notebook width (912 px) and measured by tests/figure_text.py:
no text over another, none cut off at the figure's edge or spilling out of its panel, no legend over a quarter of a
panel or over much of its data. The cases the issue saw fail first: a predicted run's title cut at both edges,
legends over a third of the loss panels at 8 workers, the error-runtime figure's "× not reached" marks run together
at 7 settings. Pure: synthetic step records (tests/figure_cases.py), no cluster."""
from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path

import pytest
from figure_cases import run as make_run
from figure_cases import runs as make_runs
from figure_text import Problems, text_problems
from matplotlib.figure import Figure
from matplotlib.text import Text

from ssptk import analysis as an
from ssptk.render.figures import comparison_figure, run_figure
from ssptk.render.held_out_plot import held_out_figure
from ssptk.render.overlay import overlay_figure
from ssptk.render.predicted_overlay import predicted_figure
from ssptk.render.report import build_report
from ssptk.render.tradeoff_plot import tradeoff_figure

LABELS = (2, 7, 12)
WORKERS = (3, 8, 32)
NETWORK = "ps=50mbit:20ms,worker=20mbit:5ms"  # a long title: the run's conditions are in it


def _predicted(n: int) -> Figure:
    measured = make_runs(n)
    predicted = {label: make_run(label, 3, fate="ok" if i % 2 else "stuck", seed=50 + i, predicted=True)
                 for i, label in enumerate(measured)}
    table = an.compare_table(measured)
    return predicted_figure(measured, predicted, an.predicted_table(table, predicted, measured))


def _tradeoff(n: int) -> Figure:
    table = an.compare_table(make_runs(n))
    return tradeoff_figure(table, table.attrs.get("target"))


def _live(workers: int, final: bool) -> Figure:
    """The live dashboard's figure (the background widget's is the same), mid-run or at the end."""
    from ssptk.notebook.dashboard import LiveDashboard

    steps, events, config, summary = make_run("local:16", workers, network=NETWORK, jitter="lognormal:0.3")
    clock = types.SimpleNamespace(now=0.0)
    dash = LiveDashboard(interval=0, sink=lambda *_a: None, clock=lambda: clock.now)
    dash.started("r", types.SimpleNamespace(**config["options"]), len(steps))
    records, evs = steps.to_dict("records"), events.to_dict("records")
    cut = len(records) if final else len(records) // 3
    dash.records(records[:cut], evs if final else [e for e in evs if e["event"] == "start"], cut, len(records))
    if final:
        dash.finished(types.SimpleNamespace(summary={**summary, "steps_per_s": 10.0}))
    assert dash.figure is not None and dash.error is None
    assert dash.png  # drawn as the dashboard draws it
    return dash.figure.fig


#: name -> a function giving the figure. Settings: the comparison, its held-out losses, predicted runs drawn over
#: measured ones, the explorer's overlay with predictions, the error-runtime figure; workers: one run's six panels
#: (an SSP run under a shaped network, a predicted local SGD run), a comparison, the live figure.
CASES: dict[str, Callable[[], Figure]] = {}
for _n in LABELS:
    CASES[f"comparison-{_n}-settings"] = lambda n=_n: comparison_figure(make_runs(n, 4, straggler=True))
    CASES[f"held-out-{_n}-settings"] = lambda n=_n: held_out_figure(make_runs(n, held_out=True), 0.5)
    CASES[f"predicted-{_n}-settings"] = lambda n=_n: _predicted(n)
    CASES[f"tradeoff-{_n}-settings"] = lambda n=_n: _tradeoff(n)
for _w in WORKERS:
    CASES[f"run-{_w}-workers"] = lambda w=_w: run_figure(*make_run("ssp:4", w, network=NETWORK, jitter="lognormal:0.3")[:3])
    CASES[f"predicted-run-{_w}-workers"] = lambda w=_w: run_figure(*make_run("local:16", w, predicted=True,
                                                                             network="ps=50mbit")[:3])
    CASES[f"comparison-{_w}-workers"] = lambda w=_w: comparison_figure(make_runs(3, w))
    CASES[f"live-final-{_w}-workers"] = lambda w=_w: _live(w, final=True)
CASES["live-mid-run-32-workers"] = lambda: _live(32, final=False)

@pytest.mark.parametrize("name", list(CASES))
def test_every_figure_is_readable_at_scale(name: str) -> None:
    fig = CASES[name]()
    problems = text_problems(fig)
    assert not problems, f"{name}:\n" + "\n".join(problems)


def test_the_reports_figures_are_readable_with_seven_settings() -> None:
    """The report of a 7-setting comparison with predictions and held-out losses: its comparison, predicted and
    held-out figures, and a run's six panels (the error-runtime figure: test above, the verdict branch's)."""
    measured = make_runs(7, held_out=True)
    predicted = {label: make_run(label, 3, seed=50 + i, predicted=True) for i, label in enumerate(measured)}
    report = build_report(measured, per_run=False, predicted=predicted)
    figures = [(caption, fig) for caption, fig in report.figures if not caption.startswith("What staleness costs")]
    figures.append(("a run", run_figure(*make_run("ssp:4", 8)[:3])))
    assert len(figures) == 4
    found = {caption: text_problems(fig) for caption, fig in figures}
    assert not any(found.values()), found


def test_the_staleness_explorers_figure_is_readable_with_many_runs(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The explorer (its own title, the run's note) after 2, 7 and 12 staleness values were run at 8 workers, and
    a sweep's slider view over them with their predictions dashed."""
    pytest.importorskip("ipywidgets")
    from test_widgets import FakeRunner

    from ssptk.notebook import explorer, slider_predictions, staleness_widgets

    monkeypatch.setattr(explorer, "_RUNS", {})
    monkeypatch.setattr(explorer, "PREDICTED", {})
    monkeypatch.setattr(slider_predictions, "PREDICTED", explorer.PREDICTED)
    values = [0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 32]
    runner = FakeRunner(tmp_path / "runs")
    ex = staleness_widgets.staleness_explorer(workers=8, staleness=values, runner=runner, steps=12, straggler=0.01)
    made = {ex.key(s): runner(**ex.options(s)) for s in values}  # what Run would have made, without a redraw each
    for n in LABELS:
        ex.results = dict(list(made.items())[:n])
        found = text_problems(ex.figure())
        assert not found, (n, found)
    frames = {label: (r.df, r.events, r.config) for label, r in ex._runs().items()}
    frames.update({f"{label} predicted": value for label, value in list(frames.items())[:6]})
    assert not text_problems(overlay_figure(frames, next(iter(frames)), title="ssptk staleness sweep"))


# --- the check sees what a reader sees -----------------------------------------------------------------------

def _figure() -> Figure:
    return Figure(figsize=(11.0, 4.0), layout="constrained")


def test_the_check_finds_overlaps_cut_titles_and_legends_over_the_data() -> None:
    fig = Figure(figsize=(11.0, 7.0), layout="constrained")
    ax = fig.subplots(2, 3)[0, 0]  # a panel of six, as a run's figure has
    ax.plot(range(100), [i % 7 for i in range(100)])
    for i in range(12):
        ax.plot(range(100), [i + j / 100 for j in range(100)], label=f"a setting named {i}")
    ax.legend()
    fig.suptitle("a title far too long for its figure " * 6)
    ax.text(20, 3, "one note")
    ax.text(21, 3, "another note")
    ax.set_xticks(range(0, 100, 2), [f"label {i}" for i in range(0, 100, 2)])
    found = text_problems(fig)
    assert found.of("clipped") == [f"clipped: suptitle {fig.get_suptitle()!r} at the left and right edges"]
    assert "overlap: text in panel 'untitled' 'one note' / text in panel 'untitled' 'another note'" in found
    assert any(p.startswith("overlap: x tick of panel 'untitled' 'label 0' / x tick") for p in found)
    assert found.of("legend covers") and found.of("legend hides")
    assert isinstance(found, Problems) and {"clipped", "overlap", "legend covers", "legend hides"} <= found.kinds


def test_the_check_measures_turned_text_by_its_own_box() -> None:
    """Labels turned 35° sit side by side without touching, though the upright boxes around them overlap."""
    fig = _figure()
    ax = fig.subplots()
    ax.plot(range(20), range(20))
    ax.set_xticks(range(20), [f"setting:{i}" for i in range(20)], rotation=35, ha="right", rotation_mode="anchor")
    assert not text_problems(fig)
    upright = [t.get_window_extent() for t in ax.get_xticklabels()]
    assert all(a.overlaps(b) for a, b in zip(upright, upright[1:]))
    ax.set_xticks(range(0, 20, 2), [f"a long setting:{i}" for i in range(0, 20, 2)], rotation=35, ha="right",
                  rotation_mode="anchor", fontsize=40)
    assert text_problems(fig).of("overlap")


def test_the_check_counts_only_what_was_drawn_and_a_spilling_note() -> None:
    """A tick outside the view is not drawn (matplotlib keeps its label): not measured. A note past its panel's
    frame is."""
    fig = _figure()
    ax = fig.subplots(1, 2)[0]
    ax.plot([0, 1], [0, 1])
    ax.set_xticks([-5, 0, 1, 5], ["far left", "0", "1", "far right"])
    ax.set_xlim(0, 1)
    assert not text_problems(fig)
    ax.annotate("a note that runs on past the panel", (0.9, 0.5))
    assert text_problems(fig).of("spills") and all(isinstance(t, Text) for t in ax.texts)
