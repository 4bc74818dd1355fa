"""MkDocs hook: show mkdocstrings the package under its import name.

The checkout keeps the package in ``orchestrator/`` and installs it as ``initorch``
(pyproject's ``package-dir``). griffe, which reads the source for mkdocstrings, looks
for a folder named after the package and otherwise imports it, and an imported
``initorch`` hides the names it loads on first use. A link ``initorch ->
orchestrator`` in a git-ignored folder (the ``paths`` of mkdocs.yml's python handler)
lets griffe read the source itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

SOURCE_ROOT = Path(".cache/docs-src")


@event_priority(100)  # before mkdocstrings reads its handler paths
def on_config(config: Any) -> Any:
    """Create the link before the python handler first looks for ``initorch``."""
    repo = Path(config.config_file_path).resolve().parent
    link = repo / SOURCE_ROOT / "initorch"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(repo / "orchestrator", target_is_directory=True)
    return config
