"""The README and the documentation site: the README stays short and its links land,
the CLI reference is generated from the parser and names every command, and the exit
codes are described on one page."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

from initorch.cli import build_parser
from tests.helpers_foundation import REPO

DOCS = REPO / "docs"
README = REPO / "README.md"
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (?P<title>.+?)\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def cli_reference_hook() -> ModuleType:
    """docs/hooks/cli_reference.py, which mkdocs loads by path (it is no package)."""
    spec = importlib.util.spec_from_file_location("cli_reference",
                                                  DOCS / "hooks" / "cli_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command_paths(parser: argparse.ArgumentParser, words: tuple[str, ...] = ("initorch",)
                  ) -> list[str]:
    """``initorch plan``, ``initorch trace merge``, ...: every command, nested ones too."""
    paths = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                paths.append(" ".join((*words, name)))
                paths.extend(command_paths(command, (*words, name)))
    return paths


def test_the_cli_reference_names_every_command_with_its_own_help():
    hook = cli_reference_hook()
    reference = hook.cli_reference_markdown()
    parser = build_parser(with_extensions=False)
    commands = command_paths(parser)
    assert {"initorch plan", "initorch run", "initorch trace merge"} <= set(commands)
    for command in commands:
        assert re.search(rf"^#+ `{command}`$", reference, re.MULTILINE), command
    assert "--dist-init-addr HOST:PORT" in reference  # an option of run, from its help
    assert hook.MARKER in (DOCS / hook.PAGE).read_text(encoding="utf-8")


def slug(title: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (and GitHub, for these titles)."""
    text = re.sub(r"[^\w\s-]", "", title.replace("`", "").lower())
    return re.sub(r"[\s]+", "-", text.strip())


def anchors(document: Path) -> set[str]:
    text = FENCE.sub("", document.read_text(encoding="utf-8"))
    return {slug(match["title"]) for match in HEADING.finditer(text)}


def test_the_readme_is_short_and_its_links_land():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    for match in LINK.finditer(FENCE.sub("", text)):
        target = match["target"]
        if target.startswith(("http://", "https://", "#")):
            continue
        path, _, anchor = target.partition("#")
        assert (REPO / path).exists(), target
        if anchor:
            assert anchor in anchors(REPO / path), target


def test_the_readme_keeps_the_commands_and_the_three_uses():
    text = README.read_text(encoding="utf-8")
    for command in ("make demo ", "make demo-sglang", "make test "):
        assert command in text
    assert "### Quick start" in text
    assert re.search(r"^### 1\. Load a hardware profile", text, re.MULTILINE)
    assert re.search(r"^### 2\. Dry-run", text, re.MULTILINE)
    assert re.search(r"^### 3\. Embed the resolver", text, re.MULTILINE)


def test_the_exit_codes_are_described_on_one_page():
    pages = [path.relative_to(REPO) for path in [README, *sorted(DOCS.rglob("*.md"))]
             if "exit-codes" in anchors(path)]
    assert pages == [Path("docs/failures.md")]
