"""The Sphinx extension of ssptk's documentation: the reference, generated from the code at build time.

Directives (each reads ssptk's own definitions when the site is built; no generated page is kept in the repository):

- ``ssptk-options``: every run option, from the one table :data:`ssptk.core.options.OPTIONS`, with the default and
  help ``--help`` shows, the Python keyword, and the commands that take it (read from the parsers themselves).
- ``ssptk-command-options``: the options of each command that are not run options (``compare``'s labels, ``--repeat``,
  ``report --gather``, ``sim --overhead``, ``%dtrain --background``, ``ssptk worker --cluster``, ...), from the parsers.
- ``ssptk-help COMMAND``: that command's ``--help``, as a terminal 90 columns wide prints it.
- ``ssptk-exit-codes`` and ``ssptk-platforms``: :data:`ssptk.core.help_text.EXIT_CODES` and ``PLATFORMS`` as lists.

The option directives emit reST (``.. program::`` and ``.. option::``, so that ``{option}`` references work): use them
in ``.rst`` pages, or in an ``{eval-rst}`` block of a Markdown page.

Links: the docs' Markdown sources are also read on GitHub, where ``../CONTRIBUTING.md`` or
``../benchmarks/RESULTS.md#tradeoff`` are right. On the site those files are pages of their own (included from
``docs/``): :func:`rewrite_links` points such links at those pages as each source or included file is read.
"""
from __future__ import annotations

import argparse
import os
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

DOCS = Path(__file__).resolve().parent.parent
ROOT = DOCS.parent

#: Files outside docs/ that are pages of the site: the repository path -> the page (a docname under docs/).
OUTSIDE_PAGES = {
    "README.md": "index",
    "CONTRIBUTING.md": "contributing",
    "benchmarks/FINDINGS.md": "findings/lab-log",
    "benchmarks/RESULTS.md": "findings/results",
    "benchmarks/experiments/README.md": "findings/experiments",
}
_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")
HELP_COLUMNS = 90


def rst_escape(text: str) -> str:
    """``text`` as reST shows it literally: every markup character backslash-escaped."""
    return re.sub(r"([\\`*_|\[\]<>])", r"\\\1", text)


def rewrite_links(text: str, file: Path, docname: str) -> str:
    """The Markdown links of ``text`` (read from ``file``, shown on page ``docname``) as the site needs them: a link to
    a repository file that the site shows as a page (:data:`OUTSIDE_PAGES`, a notebook's executed copy) goes to that
    page; any other link to a file of the repository is made relative to the page (an included file's links are
    written from where that file lies). Links that lead nowhere are left as they are, for the strict build to
    report."""
    page_dir = DOCS / posixpath.dirname(docname)

    def one(m: re.Match[str]) -> str:
        target = m.group(2)
        if "://" in target or target.startswith(("mailto:", "/")):
            return m.group(0)
        resolved = (file.parent / target).resolve()
        try:
            repo_path = resolved.relative_to(ROOT).as_posix()
        except ValueError:
            return m.group(0)
        page = OUTSIDE_PAGES.get(repo_path)
        if page is not None:
            resolved = DOCS / (page + ".md")
        elif repo_path.startswith("notebooks/") and (DOCS / repo_path).exists():
            resolved = DOCS / repo_path  # the executed copy (docs/run_notebooks.py)
        elif not resolved.exists():
            return m.group(0)
        new = os.path.relpath(resolved, page_dir)
        return f"{m.group(1)}{Path(new).as_posix()}{m.group(3) or ''}{m.group(4)}"

    return _LINK.sub(one, text)


def _on_source_read(app: Sphinx, docname: str, source: list[str]) -> None:
    path = Path(app.env.doc2path(docname))
    if path.suffix == ".md":
        source[0] = rewrite_links(source[0], path, docname)


def _on_include_read(app: Sphinx, relative_path: Path, parent_docname: str, content: list[str]) -> None:
    # MyST's include passes the parent's file name without its folder as parent_docname: the page being read is
    # the environment's current document
    path = (Path(app.srcdir) / relative_path).resolve()
    if path.suffix == ".md":
        content[0] = rewrite_links(content[0], path, app.env.docname)


# --- the parsers ----------------------------------------------------------------------------------------------------

def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by the name people type: ``ssptk run`` ... ``ssptk worker``, ``%dtrain run`` ...."""
    from ssptk.commands import build_parser
    from ssptk.runtime.task import parser as worker_parser

    cli = build_parser()
    found: dict[str, argparse.ArgumentParser] = {"ssptk": cli}
    found.update({f"ssptk {name}": p for name, p in cli.commands.items() if name != "worker"})
    found["ssptk worker"] = worker_parser()
    notebook = build_parser(notebook=True)
    found.update({f"%dtrain {name}": p for name, p in notebook.commands.items()})
    return found


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:  # argparse keeps no public list of a parser's arguments
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            yield action


def help_of(parser: argparse.ArgumentParser) -> str:
    """``parser``'s ``--help`` as a terminal :data:`HELP_COLUMNS` wide prints it."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    try:
        return parser.format_help()
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def signature(action: argparse.Action) -> str:
    """An argument as ``.. option::`` writes it: ``--repeat R``, ``--predict``, ``MODE``."""
    if not action.option_strings:
        return str(action.metavar or action.dest)
    flag = max(action.option_strings, key=len)
    if action.nargs == 0:
        return flag
    return f"{flag} {action.metavar or action.dest.upper()}"


def _rst(directive: SphinxDirective, lines: list[str]) -> list[nodes.Node]:
    container = nodes.container()
    directive.state.nested_parse(StringList(lines, source="<ssptk-docs>"), directive.content_offset, container)
    return container.children


class OptionsDirective(SphinxDirective):
    """Every run option, from :data:`ssptk.core.options.OPTIONS`."""

    def run(self) -> list[nodes.Node]:
        from ssptk.core.options import OPTIONS

        taken = {name: {a.dest for a in _actions(p)} for name, p in parsers().items() if name != "ssptk"}
        lines = [".. program:: ssptk run", ""]
        for o in OPTIONS:
            flag = "--" + o.name.replace("_", "-")
            lines += [f".. option:: {flag}" + ("" if o.flag else f" {o.metavar}"), ""]
            lines += ["   " + rst_escape(o.help), ""]
            facts = []
            if o.flag:
                facts.append("a flag (default: off)")
            elif o.default not in (None, ()):
                facts.append(f"default: ``{o.default}``")
            if o.repeat:
                facts.append("repeatable")
            facts.append(f"Python: ``{o.name}=``")
            commands = [f"``{name}``" for name, dests in taken.items() if o.name in dests]
            facts.append("taken by " + ", ".join(commands))
            lines += ["   " + "; ".join(facts) + ".", ""]
        return _rst(self, lines)


class CommandOptionsDirective(SphinxDirective):
    """The options of each command that are not run options (those are :class:`OptionsDirective`'s)."""

    def run(self) -> list[nodes.Node]:
        from ssptk.core.options import OPTIONS

        run_options = {o.name for o in OPTIONS}
        lines: list[str] = []
        seen: dict[tuple[str, str], str] = {}  # (signature, help) -> the first command that showed it
        for name, parser in parsers().items():
            own = []
            for action in _actions(parser):
                if action.dest in run_options or action.help == argparse.SUPPRESS:
                    continue
                text = action.help or ""
                if action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
                    text += f" (default: {action.default})"
                first = seen.setdefault((signature(action), text), name)
                if first == name or not name.startswith("%"):  # %dtrain: only what the CLI's command lacks
                    shown = rst_escape(text)
                    own.append((signature(action), shown if first == name else f"As in ``{first}``: {shown}"))
            if not own:
                continue
            # Sphinx takes a program's name into a %-format: "%dtrain" is "dtrain" there (and in {option} references)
            lines += [f".. rubric:: {name}", "", f".. program:: {name.lstrip('%')}", ""]
            for sig, text in own:
                lines += [f".. option:: {sig}", "", "   " + text, ""]
        return _rst(self, lines)


class HelpDirective(SphinxDirective):
    """A command's ``--help``, as the terminal prints it."""

    required_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        found = parsers()
        if name not in found:
            raise self.error(f"no command {name!r}: one of {', '.join(found)}")
        text = help_of(found[name])
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def _top_level(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
    return [*parts, text[start:]]


def _bullets(items: list[str]) -> nodes.bullet_list:
    bullets = nodes.bullet_list()
    for item in items:
        bullets += nodes.list_item("", nodes.paragraph(text=item))
    return bullets


class ExitCodesDirective(SphinxDirective):
    """:data:`ssptk.core.help_text.EXIT_CODES` as a list, one exit code (or rule) an item."""

    def run(self) -> list[nodes.Node]:
        from ssptk.core.help_text import EXIT_CODES

        head, _, body = EXIT_CODES.partition(": ")
        return [nodes.paragraph(text=f"ssptk's {head}, as every command's --help ends:"),
                _bullets([p.strip().rstrip(".") for p in _top_level(body, "; ")])]


class PlatformsDirective(SphinxDirective):
    """:data:`ssptk.core.help_text.PLATFORMS` (what ``ssptk --help`` ends with) as a paragraph and a list."""

    def run(self) -> list[nodes.Node]:
        from ssptk.core.help_text import PLATFORMS

        first, *rest = PLATFORMS.strip().splitlines()
        items: list[str] = []
        for line in rest:
            if line.strip().startswith("- "):
                items.append(line.strip()[2:])
            elif items:
                items[-1] += " " + line.strip()
        return [nodes.paragraph(text=first), _bullets(items)]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("ssptk-options", OptionsDirective)
    app.add_directive("ssptk-command-options", CommandOptionsDirective)
    app.add_directive("ssptk-help", HelpDirective)
    app.add_directive("ssptk-exit-codes", ExitCodesDirective)
    app.add_directive("ssptk-platforms", PlatformsDirective)
    app.connect("source-read", _on_source_read)
    app.connect("include-read", _on_include_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
