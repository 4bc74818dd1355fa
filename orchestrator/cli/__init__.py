"""The ``initorch`` command line (``initorch``, ``python -m initorch``)."""

from initorch.cli.run import build_parser, console_main, main

__all__ = ["build_parser", "console_main", "main"]
