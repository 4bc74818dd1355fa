"""The ``initorch`` command line (the console script, ``python -m initorch``).

:mod:`~initorch.cli.boundary` runs a command and turns its errors into exit codes;
:mod:`~initorch.cli.parser` declares the commands; :mod:`~initorch.cli.commands` and
:mod:`~initorch.cli.run` carry them out; :mod:`~initorch.cli.listing`,
:mod:`~initorch.cli.tables` and :mod:`~initorch.cli.output` make what they print.
"""

from initorch.cli.boundary import console_main, main
from initorch.cli.parser import build_parser

__all__ = ["build_parser", "console_main", "main"]
