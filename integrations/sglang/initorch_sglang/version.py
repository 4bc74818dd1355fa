"""Which SGLang releases this integration accepts: the ones the audit proves.

A release is *proven* when its code layout has a call map (:mod:`initorch_sglang.layouts`),
SGLang's plugin system is there, every hook target resolves in its tree, and ``initorch
sglang drift`` finds no drift against the ``sglang`` profile: then every hook, drive step
and chain the integration uses is where its map says.  The verdict is read from the
installed tree (never importing it) once per installed release and cached on disk
(``$XDG_CACHE_HOME/initorch``), keyed by the release, the tree and the integration's own
code and profiles, so a start-up pays a file read, not an ``ast`` walk.

On a release that is not proven, verify mode switches itself off with one warning line and
SGLang starts stock (``INITORCH_SGLANG_UNVERIFIED=allow`` tries anyway); drive mode, which
replaces SGLang's own start-up, refuses the launch in one line, as it does on a proven
release whose layout has no ``init_parallel_runtime`` to replace.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from initorch.kit import record
from initorch_sglang.engine import SGLANG

__all__ = ["KNOWN_SGLANG", "UNVERIFIED_ENV", "SGLangVerdict", "UnknownSGLangError",
           "accept_installed_sglang", "check_sglang_version", "installed_sglang",
           "installed_tree_path", "installed_verdict", "prove",
           "refusal", "sglang_verdict"]

KNOWN_SGLANG = ("0.5.23",)
"""The releases run end to end in this project's tests (a real server); the audit proves
the others from their code."""

UNVERIFIED_ENV = "INITORCH_SGLANG_UNVERIFIED"
_NOT_RUN = "the audit could not run"
"""A verdict's reason when reading failed for a reason of this machine's, not of the
release (a profile that does not load): such a verdict is not cached."""
_PACKAGE = Path(__file__).resolve().parent


class UnknownSGLangError(RuntimeError):
    """The installed SGLang is not one whose start-up this integration has proven."""


@record
class SGLangVerdict:
    """What the audit says of one installed release: ``accepted`` (proven), whether drive
    mode can replace its start-up (``drive``), and why not (``reason``, one line)."""

    version: str | None
    accepted: bool
    drive: bool
    layout: str | None
    reason: str


def installed_sglang() -> str | None:
    """The installed ``sglang`` distribution's version, without importing it."""
    return SGLANG.version()


def installed_tree_path() -> Path | None:
    """The installed ``sglang`` package's folder, found without importing it."""
    return SGLANG.package_root()


def prove(tree_path: Path, found: str | None) -> SGLangVerdict:
    """Read the release at ``tree_path`` and decide (no cache)."""
    from initorch import Registry, load_plan
    from initorch.kit import SourceError
    from initorch_sglang.audit import sglang_support
    from initorch_sglang.drift import check_drift, open_tree
    from initorch_sglang.layouts import recognise
    from initorch_sglang.registration import register
    from initorch_sglang.selection import OVERLAYS

    try:
        tree = open_tree(tree_path)
        layout = recognise(tree)
        if layout is None:
            return SGLangVerdict(found, False, False, None, "its code layout has no call map "
                                 "in initorch_sglang/layouts")
        supported, detail = sglang_support(tree, layout)
        if not supported:
            return SGLangVerdict(found, False, False, layout.name, detail)
        registry = Registry.with_plugins()
        if "sglang_load_model" not in registry.steps:
            register(registry)
        report = check_drift(tree, load_plan(list(OVERLAYS), device="cpu", registry=registry),
                             layout)
    except (SourceError, OSError) as error:
        return SGLangVerdict(found, False, False, None, str(error).splitlines()[0])
    except Exception as error:  # the plugin must leave SGLang stock, never crash its start
        return SGLangVerdict(found, False, False, None, f"{_NOT_RUN}: {type(error).__name__}: "
                             f"{(str(error).splitlines() or [''])[0]}")
    if report.drifted:
        first = next((f"{c.edge.source} before {c.edge.target}" for c in report.checks
                      if c.verdict == "drift"), report.missing[0] if report.missing else "")
        count = sum(1 for c in report.checks if c.verdict == "drift") + len(report.missing)
        return SGLangVerdict(found, False, False, layout.name,
                             f"drift against the sglang profile ({count}: {first}; "
                             "initorch sglang drift shows it)")
    return SGLangVerdict(found, True, layout.parallel_runtime is not None, layout.name,
                         f"layout {layout.name}: hook targets resolve, no drift")


def _fingerprint(tree_path: Path, found: str) -> str:
    """The cache key: the release, its tree, and the code that judges it (this
    integration's code and profiles, and the kit's drift and audit), each file by its
    path, size and modification time, as Python's bytecode cache keys a module: every
    process of a launch computes it, and reading and hashing the files' contents cost
    each about 2 ms."""
    import initorch.kit

    digest = hashlib.sha256(f"{found}\0{tree_path}".encode())
    kit = Path(initorch.kit.__file__).parent
    for source in [tree_path / SGLANG.marker, *sorted([
            *_PACKAGE.rglob("*.py"), *_PACKAGE.rglob("*.yaml"), *kit.glob("*.py")])]:
        try:
            stat = source.stat()
        except OSError:
            continue  # a tree without the marker: the verdict says so
        digest.update(f"\0{source}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:20]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "initorch"


def sglang_verdict(cache_dir: Path | None = None) -> SGLangVerdict:
    """The installed release's verdict, from the cache or read once and cached."""
    found = installed_sglang()
    tree_path = installed_tree_path()
    if found is None or tree_path is None:
        return SGLangVerdict(found, False, False, None, "SGLang is not installed")
    cache = (cache_dir or _cache_dir()) / f"sglang-{found}-{_fingerprint(tree_path, found)}.json"
    try:
        return SGLangVerdict(**json.loads(cache.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    verdict = prove(tree_path, found)
    if verdict.reason.startswith(_NOT_RUN):
        return verdict
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=cache.parent, delete=False,
                                         suffix=".tmp") as handle:
            json.dump(asdict(verdict), handle)
        os.replace(handle.name, cache)  # ranks may write at once: each write is whole
    except OSError:
        pass  # an unwritable cache costs time, not correctness
    return verdict


@functools.cache
def installed_verdict() -> SGLangVerdict:
    """:func:`sglang_verdict` once per process: the plugin's gate and the call map both
    need it, and the cache key hashes this integration's files (3-5 ms a time)."""
    return sglang_verdict()


def check_sglang_version(found: str | None = None) -> str:
    """The installed release if the audit proves it (``found``: judge that version
    string against :data:`KNOWN_SGLANG` instead); else :class:`UnknownSGLangError`."""
    if found is not None:
        if found in KNOWN_SGLANG:
            return found
        known = ", ".join(KNOWN_SGLANG)
        raise UnknownSGLangError(
            f"initorch-sglang: SGLang {found} is not supported (known: {known}); install "
            f"sglang=={KNOWN_SGLANG[-1]}, or unset INITORCH_SGLANG to start SGLang without "
            "initorch")
    verdict = sglang_verdict()
    if verdict.accepted and verdict.version is not None:
        return verdict.version
    raise UnknownSGLangError(refusal(verdict))


def refusal(verdict: SGLangVerdict) -> str:
    """One line: why the installed release is not proven."""
    what = "SGLang is not installed" if verdict.version is None \
        else f"SGLang {verdict.version} is not proven for initorch ({verdict.reason})"
    return (f"initorch-sglang: {what}; proven: the releases initorch sglang audit supports "
            f"with no drift (run end to end: {', '.join(KNOWN_SGLANG)})")


def accept_installed_sglang(mode: str, environ: dict[str, str] | None = None,
                            launcher: bool = True) -> bool:
    """The plugin's gate: ``True`` to go on in ``mode``; ``False`` to leave SGLang stock
    (verify mode on an unproven release; the ``launcher`` writes the one warning line);
    :class:`UnknownSGLangError` when drive mode cannot run on the installed release."""
    environ = dict(os.environ) if environ is None else environ
    verdict = installed_verdict()
    if mode == "drive":
        if not verdict.accepted:
            raise UnknownSGLangError(f"{refusal(verdict)}; drive mode refuses the launch")
        if not verdict.drive:
            raise UnknownSGLangError(
                f"initorch-sglang: SGLang {verdict.version} (layout {verdict.layout}) has no "
                "init_parallel_runtime for drive mode to replace; use INITORCH_SGLANG=verify")
        return True
    if verdict.accepted or environ.get(UNVERIFIED_ENV) == "allow":
        return True
    if launcher:
        sys.stderr.write(f"{refusal(verdict)}; verify mode is off and SGLang starts without "
                         f"initorch ({UNVERIFIED_ENV}=allow tries anyway)\n")
    return False
