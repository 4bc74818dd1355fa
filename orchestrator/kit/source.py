"""An engine release read as text: the engine's package in a wheel or a source tree.

Nothing here imports the engine; :mod:`ast` parses each file on demand, decoded as Python
decodes source (PEP 263: :func:`importlib.util.decode_source`).  What a hostile or broken
input can cost is capped: a file read or inflated beyond :data:`MAX_FILE_BYTES` is refused,
as is a file that is not valid Python, each as one :class:`SourceError` naming the file.
"""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import field
from importlib.util import decode_source
from pathlib import Path
from typing import TYPE_CHECKING

from initorch.records import record

if TYPE_CHECKING:
    from initorch.kit.engine import Engine

__all__ = ["MAX_FILE_BYTES", "SourceError", "SourceTree"]

MAX_FILE_BYTES = 16 * 1024 * 1024
"""The largest package file read (an engine's largest source file, its server arguments,
is under 0.5 MB); a larger one is refused rather than read or inflated."""


class SourceError(ValueError):
    """The path is not a readable source tree or wheel of the engine (one line, naming it)."""


@record(frozen=False)
class SourceTree:
    """The engine package's files, from a directory or a wheel, read on demand; paths
    are inside the package (``srt/utils/common.py``)."""

    origin: Path
    engine: Engine
    _wheel: zipfile.ZipFile | None = None
    _root: Path | None = None
    _parsed: dict[str, ast.Module | None] = field(default_factory=dict)
    _texts: dict[str, str | None] = field(default_factory=dict)
    derived: dict[tuple[str, str], object] = field(default_factory=dict)
    """What readers derive from a file once (an import index), keyed by (kind, file)."""

    @classmethod
    def open(cls, path: Path, engine: Engine) -> SourceTree:
        """The package of ``engine`` in the wheel or folder ``path`` (the folder may be
        the package, hold it, or hold it under ``python/``, as a checkout does);
        :class:`SourceError` when none is there."""
        package, marker = engine.package, engine.marker
        if path.is_file() and path.suffix == ".whl":
            try:
                wheel = zipfile.ZipFile(path)
            except (zipfile.BadZipFile, OSError) as error:
                raise SourceError(f"{path}: not a readable wheel ({error})") from None
            if f"{package}/{marker}" not in wheel.namelist():
                top = marker.split("/")[0]
                raise SourceError(f"{path}: a wheel without {package}/{top} (not a wheel "
                                  f"of {engine.name})")
            return cls(path, engine, _wheel=wheel)
        for candidate in (path, path / package, path / "python" / package):
            if (candidate / marker).is_file():
                return cls(path, engine, _root=candidate)
        raise SourceError(f"{path}: no {package} package here (looked for {marker} in it, "
                          f"in {package}/ and in python/{package}/)")

    def _bytes(self, file: str) -> bytes | None:
        if self._wheel is not None:
            member_name = f"{self.engine.package}/{file}"
            try:
                info = self._wheel.getinfo(member_name)
            except KeyError:
                return None
            if info.file_size > MAX_FILE_BYTES:
                raise SourceError(f"{self.origin}: {member_name} inflates to "
                                  f"{info.file_size} bytes (more than {MAX_FILE_BYTES})")
            try:
                with self._wheel.open(info) as member:
                    data = member.read(MAX_FILE_BYTES + 1)
            except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError,
                    EOFError, ValueError) as error:
                raise SourceError(f"{self.origin}: {member_name} cannot be read "
                                  f"({error})") from None
            if len(data) > MAX_FILE_BYTES:
                raise SourceError(f"{self.origin}: {member_name} inflates to more than "
                                  f"{MAX_FILE_BYTES} bytes")
            return data
        assert self._root is not None
        target = self._root / file
        if not target.is_file():
            return None
        with target.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise SourceError(f"{target}: more than {MAX_FILE_BYTES} bytes")
        return data

    def text(self, file: str) -> str | None:
        """The text of ``file`` (a path inside the package), or ``None`` if missing."""
        if file not in self._texts:
            data = self._bytes(file)
            try:
                self._texts[file] = None if data is None else decode_source(data)
            except (SyntaxError, UnicodeDecodeError, LookupError) as error:
                raise SourceError(f"{self._where(file)}: cannot be decoded ({error})") \
                    from None
        return self._texts[file]

    def has(self, file: str) -> bool:
        """Whether the package holds ``file``, without reading it."""
        if self._wheel is not None:
            try:
                self._wheel.getinfo(f"{self.engine.package}/{file}")
            except KeyError:
                return False
            return True
        assert self._root is not None
        return (self._root / file).is_file()

    def module(self, file: str) -> ast.Module | None:
        """``file`` parsed, or ``None`` if missing; a file that is not Python is refused."""
        if file not in self._parsed:
            text = self.text(file)
            try:
                self._parsed[file] = None if text is None else ast.parse(text, filename=file)
            except (SyntaxError, ValueError) as error:
                raise SourceError(f"{self._where(file)}: not valid Python ({error})") \
                    from None
        return self._parsed[file]

    def _where(self, file: str) -> str:
        return f"{self.origin}: {self.engine.package}/{file}" if self._wheel is not None \
            else str((self._root or self.origin) / file)

    def version(self) -> str | None:
        """The release: the wheel's name, the installed distribution's metadata beside
        the package, else the package's ``version.py`` (a source checkout)."""
        names = [re.sub(r"[-_.]+", "_", name) for name in self.engine.distributions]
        if self._wheel is not None:
            for name in names:  # a wheel's name spells the distribution with underscores
                match = re.search(rf"{re.escape(name)}-([^-]+)-", self.origin.name)
                if match:
                    return match.group(1)
            return None
        assert self._root is not None
        for name in names:
            for metadata in sorted(self._root.parent.glob(f"{name}-*.dist-info/METADATA")):
                found = re.search(r"^Version: (\S+)$", metadata.read_text(), re.MULTILINE)
                if found:
                    return found.group(1)
        text = self.text("version.py") or ""
        match = re.search(r"__version__\s*=\s*[\"']([^\"']+)", text)
        return match.group(1) if match else None
