"""``python -m initorch`` is the ``initorch`` command."""

from initorch.cli import console_main

console_main()
