"""``python -m initorch`` is the ``initorch`` command."""

import sys

from initorch.cli import main

sys.exit(main())
