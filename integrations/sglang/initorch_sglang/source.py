"""An SGLang release read as text: the ``sglang`` package of a wheel or a source tree.

Nothing here imports SGLang; :mod:`ast` parses each file on demand, decoded as Python
decodes source (PEP 263: :func:`importlib.util.decode_source`).  What a hostile or broken
input can cost is capped: a file read or inflated beyond :data:`MAX_FILE_BYTES` is refused,
as is a file that is not valid Python, each as one :class:`SourceError` naming the file.
"""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass, field
from importlib.util import decode_source
from pathlib import Path

__all__ = ["MAX_FILE_BYTES", "SourceError", "SourceTree"]

MAX_FILE_BYTES = 16 * 1024 * 1024
"""The largest package file read (SGLang 0.5.23's largest, ``srt/server_args.py``, is
under 0.5 MB); a larger one is refused rather than read or inflated."""

_MARKER = "srt/managers/scheduler.py"


class SourceError(ValueError):
    """The path is not a readable SGLang source tree or wheel (one line, naming it)."""


@dataclass(slots=True)
class SourceTree:
    """The ``sglang`` package's files, from a directory or a wheel, read on demand."""

    origin: Path
    _wheel: zipfile.ZipFile | None = None
    _root: Path | None = None
    _parsed: dict[str, ast.Module | None] = field(default_factory=dict)
    _texts: dict[str, str | None] = field(default_factory=dict)
    derived: dict[tuple[str, str], object] = field(default_factory=dict)
    """What readers derive from a file once (an import index), keyed by (kind, file)."""

    @classmethod
    def open(cls, path: Path) -> SourceTree:
        if path.is_file() and path.suffix == ".whl":
            try:
                wheel = zipfile.ZipFile(path)
            except (zipfile.BadZipFile, OSError) as error:
                raise SourceError(f"{path}: not a readable wheel ({error})") from None
            if f"sglang/{_MARKER}" not in wheel.namelist():
                raise SourceError(f"{path}: a wheel without sglang/srt (not an SGLang wheel)")
            return cls(path, _wheel=wheel)
        for candidate in (path, path / "sglang", path / "python" / "sglang"):
            if (candidate / _MARKER).is_file():
                return cls(path, _root=candidate)
        raise SourceError(f"{path}: no sglang package here (looked for {_MARKER} in it, in "
                          "sglang/ and in python/sglang/)")

    def _bytes(self, file: str) -> bytes | None:
        if self._wheel is not None:
            try:
                info = self._wheel.getinfo(f"sglang/{file}")
            except KeyError:
                return None
            if info.file_size > MAX_FILE_BYTES:
                raise SourceError(f"{self.origin}: sglang/{file} inflates to "
                                  f"{info.file_size} bytes (more than {MAX_FILE_BYTES})")
            try:
                with self._wheel.open(info) as member:
                    data = member.read(MAX_FILE_BYTES + 1)
            except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError,
                    EOFError, ValueError) as error:
                raise SourceError(f"{self.origin}: sglang/{file} cannot be read "
                                  f"({error})") from None
            if len(data) > MAX_FILE_BYTES:
                raise SourceError(f"{self.origin}: sglang/{file} inflates to more than "
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
                self._wheel.getinfo(f"sglang/{file}")
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
        return f"{self.origin}: sglang/{file}" if self._wheel is not None \
            else str((self._root or self.origin) / file)

    def version(self) -> str | None:
        """The release: the wheel's name, the installed distribution's metadata beside
        the package, else the package's ``version.py`` (a source checkout)."""
        if self._wheel is not None:
            match = re.search(r"sglang-([^-]+)-", self.origin.name)
            return match.group(1) if match else None
        assert self._root is not None
        for metadata in sorted(self._root.parent.glob("sglang-*.dist-info/METADATA")):
            found = re.search(r"^Version: (\S+)$", metadata.read_text(), re.MULTILINE)
            if found:
                return found.group(1)
        text = self.text("version.py") or ""
        match = re.search(r"__version__\s*=\s*[\"']([^\"']+)", text)
        return match.group(1) if match else None
