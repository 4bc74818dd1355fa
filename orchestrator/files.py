"""The files a command names: inputs read within bounds, outputs checked first and
replaced atomically.

Inputs (profiles, saved plans) are read only when they are regular files, and at
most :data:`MAX_INPUT_BYTES`: ``extends: /dev/zero`` or a FIFO is refused at once
instead of reading for ever, and a file too large to be a profile is refused
before it is parsed.  Outputs (``--report``, ``--trace``, ``--out``) are checked
before anything runs -- a folder that exists and can be written, no device or
directory in the way, no input file of the same command, no two outputs on one
path -- and written to a temporary file that then replaces the target, so a
failure never leaves half a file behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping

from initorch.errors import InitorchError, Problem
from initorch.location import display_path
from initorch.records import record

MAX_INPUT_BYTES = 16 * 2**20
"""The largest profile or saved plan read (16 MiB).  A generated 100,000-step profile
with a requires list and a timeout per step is about 5 MiB."""


class InputFileError(OSError):
    """A file that cannot be an input: not a regular file, or too large."""


def read_input(path: str | os.PathLike[str], limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them.

    Raises :class:`InputFileError` for anything else (a FIFO, a device, a
    directory, a file over the limit) and :class:`OSError` when it cannot be
    opened (missing, no permission, a symbolic link loop).  Never blocks on a
    FIFO and never reads more than ``limit + 1`` bytes.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputFileError(errno.EINVAL, f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > limit:
            raise InputFileError(errno.EFBIG, f"{info.st_size} bytes, more than the limit of "
                                              f"{limit} bytes ({limit // 2**20} MiB)")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew while being read
            raise InputFileError(errno.EFBIG, f"more than the limit of {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def describe_os_error(exc: OSError) -> str:
    """What went wrong reading a file, in words (a symbolic link loop says so)."""
    if exc.errno == errno.ELOOP:
        return "a loop of symbolic links"
    return exc.strerror or str(exc)


@record
class OutputFile:
    """A file a command will write: the option that names it and the path given."""

    option: str
    path: str

    @property
    def target(self) -> str:
        """Where the file will really be written (a symbolic link is followed)."""
        return os.path.realpath(self.path)


def check_outputs(outputs: Iterable[OutputFile], inputs: Iterable[str]) -> list[OutputFile]:
    """The outputs given, checked before anything runs; :class:`InitorchError` lists
    every output that could not be written or would destroy something."""
    given = [output for output in outputs if output.path]
    read = {os.path.realpath(path) for path in inputs}
    problems: list[Problem] = []
    seen: dict[str, OutputFile] = {}
    for output in given:
        problem = _output_problem(output, read, seen)
        if problem is not None:
            problems.append(Problem(f"{output.option} {display_path(output.path)}: {problem[0]}",
                                    hint=problem[1]))
        seen.setdefault(output.target, output)
    if problems:
        raise InitorchError(f"{len(problems)} output file(s) cannot be written",
                            problems=problems)
    return given


def _output_problem(output: OutputFile, read: set[str], seen: Mapping[str, OutputFile]
                    ) -> tuple[str, str] | None:
    target = output.target
    folder = os.path.dirname(target)
    if target in seen:
        return (f"also given to {seen[target].option}; one would replace the other",
                "write each to its own file")
    if target in read:
        return ("is an input of this command; writing it would destroy it",
                "write it elsewhere")
    if not os.path.isdir(folder):
        return "the folder does not exist", "create it first, or write the file elsewhere"
    if os.path.lexists(target):
        mode = os.stat(target).st_mode
        if not stat.S_ISREG(mode):
            return (f"is {_kind(mode)}, not a regular file",
                    "name a regular file (it is replaced as a whole)")
        if not os.access(target, os.W_OK):
            return "the file is not writable", "check its permissions"
    if not os.access(folder, os.W_OK | os.X_OK):
        return ("the folder is not writable (the file is written beside it, then "
                "renamed)", "check the folder's permissions, or write the file elsewhere")
    return _try_writing_beside(target)


def _try_writing_beside(target: str) -> tuple[str, str] | None:
    """Create (and remove) the temporary file :func:`write_atomically` will create:
    permissions say nothing about /proc, a read-only mount or a full disk, and root
    passes every ``os.access`` check (``--report /proc/version`` used to pass, and
    fail only after the run)."""
    try:
        handle, probe = tempfile.mkstemp(dir=os.path.dirname(target),
                                         prefix=f".{os.path.basename(target)}.",
                                         suffix=".tmp")
    except OSError as exc:
        return (f"cannot be written: creating a file beside it failed "
                f"({exc.strerror or type(exc).__name__})", "write the file elsewhere")
    os.close(handle)
    os.unlink(probe)
    return None


def write_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over
    ``path`` (a symbolic link is followed): a reader never sees half a file, and a
    failure leaves the old file as it was.  Raises :class:`OSError`."""
    target = os.path.realpath(os.fspath(path))
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(target),
                                         prefix=f".{os.path.basename(target)}.",
                                         suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
