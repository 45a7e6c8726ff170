"""Trace readers: the public formats (``formats``), the fast columnar reader
(``columnar``, pyarrow), the Python reader that names bad lines (``rows``), and what they
share (``base``). :func:`kvgate.replay.trace.load_trace` is the entry point.
"""
