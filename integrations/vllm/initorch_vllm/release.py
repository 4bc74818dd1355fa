"""Whether the installed vLLM is one this integration can observe: its hook targets
resolve.

The targets (:mod:`initorch_vllm.layout`) are looked up in the installed ``vllm`` tree
read as text (:mod:`initorch.kit.follow`), never imported: the API server has not
imported the worker's modules, and must not pay for them.  A vLLM release that moved one
is refused in one line before any worker starts, naming the target and the command that
shows what else moved.
"""

from __future__ import annotations

from pathlib import Path

from initorch_vllm.layout import ENGINE, RELEASE, all_hook_targets

__all__ = ["refusal", "unresolved_targets"]


def unresolved_targets(tree_path: Path) -> list[str]:
    """The hook targets that the vLLM tree at ``tree_path`` does not define."""
    from initorch.kit import SourceTree, resolve_target

    tree = SourceTree.open(tree_path, ENGINE)
    return [target for target in all_hook_targets() if resolve_target(tree, target) is None]


def refusal(tree_path: Path | None = None) -> str | None:
    """One line refusing the installed vLLM (or the tree at ``tree_path``) when a hook
    target does not resolve in it; ``None`` when every one does."""
    from initorch.kit import SourceError

    path = tree_path if tree_path is not None else ENGINE.package_root()
    if path is None:
        return f"{ENGINE.integration}: no vllm package is installed"
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
