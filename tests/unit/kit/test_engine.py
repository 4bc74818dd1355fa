"""The engine's release, read from its distribution's metadata header."""

from __future__ import annotations

import sys
from importlib.metadata import distributions, version
from pathlib import Path

import pytest

from initorch.kit import Engine


def _engine(*names: str) -> Engine:
    return Engine(name="E", package="e", distributions=names, marker="x.py", command="e",
                  integration="initorch-e")


def test_every_installed_distribution_reads_as_importlib_metadata_reads_it() -> None:
    names = sorted({found.metadata["Name"] for found in distributions()
                    if found.metadata["Name"]})
    assert len(names) > 20  # the test venv: initorch's dependencies and the tools
    for name in names:
        assert _engine(name).version() == version(name), name


def test_the_header_ends_at_the_first_blank_line_whatever_the_line_endings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "crlf_engine-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(b"Metadata-Version: 2.1\r\nName: crlf-engine\r\n"
                                    b"Version: 1.0\r\n\r\nVersion: 9.9 (a README line)\r\n")
    bare = tmp_path / "bare_engine-2.0.dist-info"
    bare.mkdir()
    (bare / "METADATA").write_text("Metadata-Version: 2.1\nName: bare-engine\n\n"
                                   "Version: 9.9 (a README line)\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert _engine("no-such-engine", "crlf-engine").version() == version("crlf-engine") == "1.0"
    # No Version in the header: what importlib.metadata says (none), never a line of
    # the description.
    assert _engine("bare-engine").version() is version("bare-engine") is None
    assert _engine("no-such-engine").version() is None
