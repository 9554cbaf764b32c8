#!/usr/bin/env python
"""Make the figures of the documentation site (``docs/figures/*.png``) with ssptk's own runs and renderers.

    python docs/make_figures.py                  # every figure: real clusters, ~5-10 min on 2 cores
    python docs/make_figures.py main_job network # only these scenarios

Each scenario below is one ssptk command (shown with its figures on the pages that use them); its figures are
exactly what ``ssptk compare`` puts in ``report.html``, picked by their caption. Every PNG records in its metadata
which scenario made it and with what command (``Source``, ``Command``); ``tests/test_docs.py`` checks that every
PNG under ``docs/figures/`` is one of :data:`FIGURES`, was made by this script, and is shown on some page. The runs
are real (or, where a scenario says so, predicted) and their numbers vary from machine to machine and run to run:
the pages say what to read from a figure, not its exact values.
"""
from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIGURE_DIR = ROOT / "docs" / "figures"
DPI = 90


@dataclass(frozen=True)
class Scenario:
    """One ssptk command and the figures of its report this site shows: file name -> the report figure's caption
    (its beginning)."""

    command: str
    figures: dict[str, str]
    make: Callable[[str], Any]


def _main_job(out: str) -> Any:
    import ssptk

    return ssptk.compare(["sync", "ssp:4", "async"], model="linear", workers=3, steps=300,
                         jitter="pause:0.05:0.03", out=out)


def _modes(out: str) -> Any:
    import ssptk

    return ssptk.compare(["sync", "ssp:4", "async", "allreduce", "local:4", "async+dc"], model="linear", workers=3,
                         steps=300, jitter="pause:0.05:0.03", out=out)


def _tradeoff(out: str) -> Any:
    import ssptk

    return ssptk.compare(["sync", "ssp:8", "ssp:32", "async"], model="digits", workers=8, steps=300, lr=0.1,
                         jitter="pause:0.01:2", data_split="label", eval_every=50, out=out)


def _network(out: str) -> Any:
    """sync and async, one PS and four shards, under the same 100 Mbit/s PS links: one comparison of four runs."""
    import ssptk
    from ssptk.render.report import build_report

    runs = {}
    for mode in ("sync", "async"):
        for ps in (1, 4):
            r = ssptk.run(model="mlp", mode=mode, workers=4, steps=20, network="ps=100mbit", ps=ps,
                          out=f"{out}/{mode}-ps{ps}")
            runs[f"{mode} --ps {ps}"] = (r.df, r.events, r.config, r.summary)
    return build_report(runs, title="the PS link and shards", per_run=False)


def _predicted(out: str) -> Any:
    import ssptk

    return ssptk.compare(["sync", "ssp:4", "async"], model="digits", workers=4, steps=200, lr=0.1,
                         jitter="exp:0.01", predict=True, out=out)


SCENARIOS: dict[str, Scenario] = {
    "main_job": Scenario(
        "ssptk compare sync ssp:4 async --model linear --workers 3 --steps 300 --jitter pause:0.05:0.03",
        {"main-job.png": "All runs", "main-job-ssp4.png": "Run ssp:4", "main-job-tradeoff.png": "What staleness"},
        _main_job),
    "modes": Scenario(
        "ssptk compare sync ssp:4 async allreduce local:4 async+dc --model linear --workers 3 --steps 300 "
        "--jitter pause:0.05:0.03",
        {"modes.png": "All runs", "modes-local4.png": "Run local:4"}, _modes),
    "tradeoff": Scenario(
        "ssptk compare sync ssp:8 ssp:32 async --model digits --workers 8 --steps 300 --lr 0.1 "
        "--jitter pause:0.01:2 --data-split label --eval-every 50",
        {"tradeoff.png": "What staleness", "tradeoff-held-out.png": "Held-out loss"}, _tradeoff),
    "network": Scenario(
        "ssptk run --model mlp --mode MODE --ps K --workers 4 --steps 20 --network ps=100mbit (MODE sync, async; "
        "K 1, 4), drawn as one comparison",
        {"ps-link.png": "All runs"}, _network),
    "predicted": Scenario(
        "ssptk compare sync ssp:4 async --model digits --workers 4 --steps 200 --lr 0.1 --jitter exp:0.01 --predict",
        {"predicted.png": "Predicted"}, _predicted),
}
#: Every figure of the site: file name -> the scenario that makes it.
FIGURES: dict[str, str] = {name: key for key, s in SCENARIOS.items() for name in s.figures}


def report_of(result: Any) -> Any:
    """The :class:`ssptk.render.report.Report` of a scenario's result (a comparison's, or a report itself)."""
    return getattr(result, "report", result)


def save(fig: Any, path: Path, scenario: str, command: str) -> None:
    """``fig`` as a 256-colour PNG (matplotlib's figures lose nothing visible; about 2.5x smaller) that says
    where it came from."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    from ssptk.core.version import __version__

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    info = PngInfo()
    info.add_text("Source", f"docs/make_figures.py {scenario} (ssptk {__version__})")
    info.add_text("Command", command)
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    tmp = path.with_suffix(".tmp")
    image.save(tmp, "PNG", optimize=True, pnginfo=info)
    tmp.replace(path)


def make(key: str, scratch: str) -> list[Path]:
    scenario = SCENARIOS[key]
    report = report_of(scenario.make(f"{scratch}/{key}"))
    written = []
    for name, caption in scenario.figures.items():
        found = [fig for text, fig in report.figures if text.startswith(caption)]
        if not found:
            raise SystemExit(f"{key}: no figure captioned {caption!r} in its report: "
                             f"{[text[:40] for text, _ in report.figures]}")
        save(found[0], FIGURE_DIR / name, key, scenario.command)
        written.append(FIGURE_DIR / name)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                   help=f"scenarios to run (default: all): {', '.join(SCENARIOS)}")
    args = p.parse_args(argv)
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        p.error(f"no such scenario: {', '.join(unknown)} (there are {', '.join(SCENARIOS)})")
    sys.path.insert(0, str(ROOT))
    FIGURE_DIR.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="ssptk-figures-")
    try:
        for key in args.scenarios or SCENARIOS:
            print(f"{key}: {SCENARIOS[key].command}", flush=True)
            for path in make(key, scratch):
                print(f"  -> {path.relative_to(ROOT)}", flush=True)
    finally:
        import ssptk

        ssptk.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
