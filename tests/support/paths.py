"""Where the repository and the simulated vendor stacks are."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIMULATED_SITE = REPO / "tests" / "support" / "simulated" / "site"
"""The site directory of the simulated Ascend and MUSA stacks (``simulated/README.md``),
put on ``PYTHONPATH`` of a child process that asks for it."""
