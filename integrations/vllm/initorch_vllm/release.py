"""Whether the installed vLLM is one this integration can observe: its hook targets
resolve.

The targets (:mod:`initorch_vllm.layout`) are looked up in the installed ``vllm`` tree
read as text (:mod:`initorch.kit.follow`), never imported: the API server has not
imported the worker's modules, and must not pay for them.  A vLLM release that moved one
is refused in one line before any worker starts, naming the target and the command that
shows what else moved.

Reading the tree takes about 0.3 s (it parses the modules of every target), and the
answer only changes with the tree: so it is kept on disk (``$XDG_CACHE_HOME/initorch``)
per tree, keyed by the release, the tree's path, the size and modification time of each
file that may hold a target, and the code that judges it (this module, the call maps and
the kit's reading of source).  A launch then pays a file read; a release installed over
it, or a target's module edited in place, is read again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from initorch_vllm.layout import ENGINE, RELEASE, all_hook_targets

__all__ = ["refusal", "unresolved_targets"]

_JUDGES = ("follow.py", "source.py", "engine.py")
"""The kit's modules that read a tree for :func:`unresolved_targets` (part of the key)."""


def unresolved_targets(tree_path: Path) -> list[str]:
    """The hook targets that the vLLM tree at ``tree_path`` does not define."""
    from initorch.kit import SourceTree, resolve_target

    tree = SourceTree.open(tree_path, ENGINE)
    return [target for target in all_hook_targets() if resolve_target(tree, target) is None]


def refusal(tree_path: Path | None = None, *, cache_dir: Path | None = None) -> str | None:
    """One line refusing the installed vLLM (or the tree at ``tree_path``) when a hook
    target does not resolve in it; ``None`` when every one does.  The answer for a tree
    is read once and kept in ``cache_dir`` (default ``$XDG_CACHE_HOME/initorch``)."""
    path = tree_path if tree_path is not None else ENGINE.package_root()
    if path is None:
        return f"{ENGINE.integration}: no vllm package is installed"
    cache = (cache_dir or _cache_dir()) / f"vllm-release-{_fingerprint(path)}.json"
    try:
        kept = json.loads(cache.read_text())["refusal"]
        if kept is None or isinstance(kept, str):
            return kept
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = _judge(path)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=cache.parent, delete=False,
                                         suffix=".tmp") as handle:
            json.dump({"refusal": found}, handle)
        os.replace(handle.name, cache)  # launches may write at once: each write is whole
    except OSError:
        pass  # an unwritable cache costs time, not correctness
    return found


def _judge(path: Path) -> str | None:
    """:func:`refusal`'s answer, read from the tree (no cache)."""
    from initorch.kit import SourceError

    try:
        missing = unresolved_targets(path)
    except SourceError as error:
        return f"{ENGINE.integration}: {error}"
    if not missing:
        return None
    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
    return (f"{ENGINE.integration}: {ENGINE.label()} at {path} does not define "
            f"{missing[0]}{more}, which verify mode hooks (known: vLLM {RELEASE}); "
            f"'initorch {ENGINE.command} drift {path}' shows what moved")


def _fingerprint(path: Path) -> str:
    """The cache key of the tree at ``path``: the installed release, the path, each
    file a target's module may be (every dotted prefix of every target, as a module or a
    package) with its size and modification time, and the code that judges it."""
    import initorch.kit

    digest = hashlib.sha256(f"{ENGINE.version()}\0{path.resolve()}".encode())
    candidates: set[str] = set()
    for target in all_hook_targets():
        parts = target.split(".")[1:]  # inside the package folder
        for cut in range(1, len(parts)):
            stem = "/".join(parts[:cut])
            candidates |= {f"{stem}.py", f"{stem}/__init__.py"}
    for name in sorted(candidates):
        try:
            stat = (path / name).stat()
        except OSError:
            continue
        digest.update(f"\0{name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    kit = Path(initorch.kit.__file__).parent
    here = Path(__file__).parent
    for source in (here / "release.py", here / "layout.py", *(kit / name for name in _JUDGES)):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:20]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "initorch"
