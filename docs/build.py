#!/usr/bin/env python
"""Build the documentation site strictly: every warning (a broken link or reference, a missing figure, a notebook
without its executed copy) is an error.

    pip install '.[docs]'
    python docs/build.py                 # into docs/_build/html (open docs/_build/html/index.html)
    python docs/build.py OUT             # into OUT

The reference pages are generated from the code as the site is built (docs/_ext/ssptk_docs.py); the figures and
the notebooks' outputs are not: ``docs/make_figures.py`` and ``docs/run_notebooks.py`` make them (CONTRIBUTING.md,
"The documentation"). ``tests/test_docs.py`` runs this script.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent


def command(out: Path, doctrees: Path) -> list[str]:
    """The sphinx-build command line: fresh (-E), strict (-W, all warnings at once with --keep-going), quiet (-q)."""
    return [sys.executable, "-m", "sphinx", "-b", "html", "-E", "-W", "--keep-going", "-q", "-d", str(doctrees),
            str(DOCS), str(out)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", default=str(DOCS / "_build" / "html"), help="where the HTML goes")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    with tempfile.TemporaryDirectory(prefix="ssptk-doctrees-") as doctrees:
        code = subprocess.call(command(out, Path(doctrees)))
    if code == 0:
        print(f"built: {out / 'index.html'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
