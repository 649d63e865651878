"""``python -m timekeeper``: the local stack's command line."""

import sys

from timekeeper.local.cli import main

sys.exit(main())
