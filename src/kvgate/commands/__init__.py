"""One module per ``kvgate`` subcommand; see :mod:`kvgate.cli` for the protocol."""
