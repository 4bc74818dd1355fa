"""``python -m tiny_server``: the launcher (see ``tiny_server.launch``)."""

import sys

from tiny_server.launch import main

sys.exit(main())
