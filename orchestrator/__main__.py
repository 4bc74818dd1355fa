"""``python -m orchestrator`` is the ``initorch`` command."""

import sys

from orchestrator.cli import main

sys.exit(main())
