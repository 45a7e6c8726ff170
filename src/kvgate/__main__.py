"""``python -m kvgate`` is the ``kvgate`` command."""

import sys

from kvgate.cli import main

sys.exit(main())
