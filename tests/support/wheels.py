"""Published vendor wheels as test fixtures: fetched once, read in place, never installed.

``wheel(dist, version)`` runs ``pip download --no-deps`` into ``<repo>/.cache/wheels``
(git-ignored) the first time a wheel is asked for and reuses the file afterwards, in
this run and the next ones.  Tests read the real binaries: zip members, their bytes
(the strings a message is built from) and their ``DT_NEEDED`` entries as ``readelf``
prints them, so that a claim about a wheel is checked against the wheel and not
against a stub that encodes the claim.  A download that fails fails the test with the
pip output: a missing wheel must not look like a passing check.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO

CACHE = REPO / ".cache" / "wheels"

# The Mooncake builds the built-in steps make claims about (the hardware matrix, docs/hardware.md).
MOONCAKE_NPU = ("mooncake-transfer-engine-npu", "0.3.13.post1")
MOONCAKE_CPU = ("mooncake-transfer-engine-non-cuda", "0.3.13.post1")
MOONCAKE_CUDA12 = ("mooncake-transfer-engine", "0.3.13.post1")
MOONCAKE_CUDA13 = ("mooncake-transfer-engine-cuda13", "0.3.14")
MOONCAKE_ROCM = ("mooncake-transfer-engine-rocm", "0.3.13.post1")
MOONCAKE_WHEELS = (MOONCAKE_NPU, MOONCAKE_CPU, MOONCAKE_CUDA12, MOONCAKE_CUDA13, MOONCAKE_ROCM)


@contextlib.contextmanager
def cache_lock() -> Iterator[None]:
    """The cache to this process alone while it fetches or extracts: pytest-xdist's workers
    (``make unit``) ask for the same wheels at once, and a half-written file must not be
    read as the wheel."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w", encoding="ascii") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


@dataclass(frozen=True)
class Wheel:
    """One downloaded wheel; members are extracted on first use, next to the wheel."""

    dist: str
    version: str
    path: Path

    def __str__(self) -> str:
        return f"{self.dist} {self.version}"

    @functools.cached_property
    def members(self) -> tuple[str, ...]:
        with zipfile.ZipFile(self.path) as archive:
            return tuple(archive.namelist())

    def file(self, member: str) -> Path:
        """``member`` extracted under ``.cache/wheels/<wheel stem>/``."""
        target = self.path.with_suffix("") / member
        if not target.is_file():
            with cache_lock(), zipfile.ZipFile(self.path) as archive:
                if not target.is_file():
                    # Written beside it and renamed into place: another test worker that
                    # sees the name (it checks without the lock) never reads half a file.
                    target.parent.mkdir(parents=True, exist_ok=True)
                    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
                    with archive.open(member) as source, partial.open("wb") as out:
                        shutil.copyfileobj(source, out)
                    os.replace(partial, target)
        return target

    def unpack(self, folder: str) -> Path:
        """Every member under ``folder`` extracted (a package folder whose libraries
        find each other); returns the extracted folder."""
        for member in self.members:
            if member.startswith(folder.rstrip("/") + "/") and not member.endswith("/"):
                self.file(member)
        return self.path.with_suffix("") / folder

    def read(self, member: str) -> bytes:
        return self.file(member).read_bytes()

    def needed(self, member: str) -> tuple[str, ...]:
        """``DT_NEEDED`` of ``member`` as binutils' ``readelf -d`` reports it (an
        implementation apart from initorch's own reader)."""
        out = subprocess.run(["readelf", "-d", str(self.file(member))], check=True,
                             capture_output=True, text=True).stdout
        return tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))


@functools.cache
def wheel(dist: str, version: str) -> Wheel:
    """The published wheel ``dist==version`` for this interpreter, downloaded once."""
    stem = f"{re.sub(r'[-_.]+', '_', dist)}-{version}-"
    with cache_lock():
        found = sorted(CACHE.glob(f"{stem}*.whl"))
        if not found:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--disable-pip-version-check", "-q", "-d", str(CACHE), f"{dist}=={version}"],
                check=False, capture_output=True, text=True)
            found = sorted(CACHE.glob(f"{stem}*.whl"))
            if done.returncode != 0 or not found:
                pytest.fail(f"cannot download the real wheel {dist}=={version} into {CACHE}: "
                            f"{(done.stderr or done.stdout).strip()[-600:]}", pytrace=False)
    return Wheel(dist, version, found[-1])
