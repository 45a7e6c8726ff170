"""Trace replay: request traces (``trace``: :func:`~kvgate.replay.trace.load_trace`, the
public formats and readers under ``readers/``, time units in ``timeunits``), the
contiguous and paged allocators under one budget (``simulate`` with ``allocators``,
``timeline``, ``results``, ``series``), the measured paging reclaim for the gate
(``reclaim``), and the replay plot (``plot``).
"""
