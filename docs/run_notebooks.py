#!/usr/bin/env python
"""Execute the notebooks in ``notebooks/`` into ``docs/notebooks/``, outputs and all, for the documentation site.

    python docs/run_notebooks.py                    # every notebook, at full size (real clusters: ~20-30 min)
    python docs/run_notebooks.py network quickstart # only these
    python docs/run_notebooks.py --quick            # the test suite's smaller versions (SSPTK_NOTEBOOK_QUICK=1)

``notebooks/`` keeps the notebooks without outputs (what people open and run); the site shows the copies this
script leaves in ``docs/notebooks/``, executed top to bottom in a fresh kernel with this checkout's ssptk, every
figure and table in their saved outputs. Each copy records in its metadata (``ssptk_docs``) when and how it was
executed. ``tests/test_docs.py`` holds the copies to their sources: the same cells, word for word, all executed in
order, no error, at least one figure; a notebook edited without running this script fails it. That the current code
still runs every notebook is ``tests/test_notebooks.py``'s (their quick versions, on every run of the suite).
"""
from __future__ import annotations

import argparse
import base64
import datetime as dt
import io
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "notebooks"
TARGET = ROOT / "docs" / "notebooks"
#: The metadata key of an executed copy (what tests/test_docs.py reads).
META = "ssptk_docs"
WIDGET = "application/vnd.jupyter.widget-view+json"
_PNG_IN_HTML = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=\s]+)")


def small_png(data: str) -> str:
    """A base64 PNG as a 256-colour PNG (matplotlib's figures lose nothing visible; about 2.5x smaller)."""
    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(data)))
    out = io.BytesIO()
    image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, "PNG", optimize=True)
    return base64.b64encode(out.getvalue()).decode("ascii")


def for_the_site(output: dict) -> None:
    """Make one cell output static and small: a widget shows its static form (ssptk's widgets carry one as
    text/html, or their text), not a view that needs a live kernel; an HTML copy of the output's own PNG goes;
    every PNG is re-encoded with :func:`small_png`."""
    data = output.get("data")
    if not data:
        return
    data.pop(WIDGET, None)
    png = data.get("image/png")
    if png and png.strip()[:200] in data.get("text/html", ""):
        del data["text/html"]
    if png:
        data["image/png"] = small_png(png)
    if "text/html" in data:
        data["text/html"] = _PNG_IN_HTML.sub(lambda m: "data:image/png;base64," + small_png(m.group(1)),
                                             data["text/html"])


def execute(source: Path, target: Path, quick: bool, timeout: int) -> float:
    """Run ``source`` in a fresh kernel in a scratch directory and write it, outputs included, to ``target``."""
    import nbformat
    from nbclient import NotebookClient

    from ssptk.core.version import __version__

    nb = nbformat.read(source, as_version=4)
    env = {"PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    if quick:
        env["SSPTK_NOTEBOOK_QUICK"] = "1"
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    start = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="ssptk-docs-") as scratch:
            client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=False,
                                    resources={"metadata": {"path": scratch}})
            client.execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.monotonic() - start
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for_the_site(output)
    nb.metadata[META] = {
        "source": f"notebooks/{source.name}",
        "executed": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "ssptk": __version__,
        "quick": quick,
        "seconds": round(seconds),
        "cores": len(os.sched_getaffinity(0)),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    nbformat.write(nb, tmp)
    tmp.replace(target)
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="notebooks to run (file names with or without .ipynb; default: all)")
    p.add_argument("--quick", action="store_true", help="the smaller versions the test suite runs")
    p.add_argument("--timeout", type=int, default=1800, help="seconds a cell may take (default 1800)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    sources = sorted(SOURCE.glob("*.ipynb"))
    if args.names:
        wanted = {n if n.endswith(".ipynb") else n + ".ipynb" for n in args.names}
        unknown = wanted - {s.name for s in sources}
        if unknown:
            p.error(f"no such notebook in notebooks/: {', '.join(sorted(unknown))}")
        sources = [s for s in sources if s.name in wanted]
    for source in sources:
        print(f"{source.name}: running ...", flush=True)
        seconds = execute(source, TARGET / source.name, args.quick, args.timeout)
        print(f"{source.name}: {seconds:.0f} s -> {(TARGET / source.name).relative_to(ROOT)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
