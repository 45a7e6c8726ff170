"""``python -m kvgate`` is the ``kvgate`` command (Ctrl-C while it imports: exit 130, no traceback)."""

import sys

try:
    from kvgate.cli import console_main
except KeyboardInterrupt:
    sys.stderr.write("ERROR: interrupted\n")
    sys.exit(130)

console_main()
