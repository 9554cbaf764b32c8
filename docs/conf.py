"""Sphinx configuration of ssptk's documentation site (``python docs/build.py``; CONTRIBUTING.md says why Sphinx)."""
from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent), str(DOCS / "_ext")]  # this checkout's ssptk, and the docs' own extension

from ssptk.core.version import __version__  # noqa: E402

project = "ssptk"
author = "the ssptk authors"
copyright = "the ssptk authors, Apache-2.0"
release = version = __version__

extensions = [
    "myst_nb",               # Markdown (MyST) pages and the executed notebooks
    "sphinx.ext.autodoc",    # the Python API from the docstrings
    "ssptk_docs",            # the options, commands, exit codes and platforms from the code (docs/_ext)
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
root_doc = "index"

# MyST: GitHub-style anchors for every heading down to ###, so that "page.md#a-heading" links work here as there
myst_heading_anchors = 3
myst_heading_slug_func = "github"
myst_enable_extensions = ["colon_fence", "deflist"]

# The notebooks are shown as docs/run_notebooks.py executed them (their outputs checked in); never run at build time.
nb_execution_mode = "off"
# ssptk's widgets carry a static HTML form of themselves: show that, not a view that needs a live kernel.
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None),
                              ("html", "application/vnd.jupyter.widget-state+json", None)]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": False}

html_theme = "furo"
html_title = f"ssptk {release}"
html_static_path: list[str] = []
pygments_style = "friendly"
# Strict: tests/test_docs.py builds with -W (every warning an error) and --keep-going (all of them at once).
nitpicky = False
smartquotes = False  # "--local-steps" stays two hyphens, as the help writes it
