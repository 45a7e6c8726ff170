"""Trace replay: request traces (``trace``), the contiguous and paged allocators under one
budget (``simulate``), the measured paging reclaim for the gate (``reclaim``), and the
replay plot (``plot``).
"""
