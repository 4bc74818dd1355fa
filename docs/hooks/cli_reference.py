"""MkDocs hook: the CLI reference, generated from ``initorch.cli.build_parser()``.

``docs/reference/cli.md`` holds the prose and the marker ``<!-- cli-reference -->``;
at build time the marker becomes one section per command with the parser's own
``--help`` text, so the page cannot drift from the options the CLI really takes.
Commands that installed packages add (``initorch sglang``) are left out: they are
documented with their package.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

MARKER = "<!-- cli-reference -->"
PAGE = "reference/cli.md"
HELP_WIDTH = "100"  # argparse wraps help text to $COLUMNS; fixed, so builds are stable


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name, in the order the parser declares them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _sections(parser: argparse.ArgumentParser, words: tuple[str, ...]
              ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield words, parser
    for name, command in subcommands(parser).items():
        yield from _sections(command, (*words, name))


def cli_reference_markdown() -> str:
    """The generated part of the page: ``initorch --help``, then each command's."""
    from initorch.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        parser = build_parser(with_extensions=False)
        blocks = []
        for words, command in _sections(parser, ("initorch",)):
            level = "#" * min(len(words) + 1, 4)
            blocks.append(f"{level} `{' '.join(words)}`\n\n```text\n"
                          f"{command.format_help().rstrip()}\n```\n")
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(blocks)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Put the generated reference in place of the marker on the CLI page."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} has lost its {MARKER} marker")
    return markdown.replace(MARKER, cli_reference_markdown())
