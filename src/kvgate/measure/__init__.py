"""Measuring real memory peaks (DESIGN.md §5), without torch.

- :mod:`kvgate.measure.nvml`     the one doorway to NVML (``pynvml`` from nvidia-ml-py)
- :mod:`kvgate.measure.sampler`  one fast sampling thread, exact running peak, bounded timeline
- :mod:`kvgate.measure.host`     host memory: system used, process-tree RSS, VmHWM, cgroup
- :mod:`kvgate.measure.smi_csv`  ``nvidia-smi --query-gpu=... --format=csv`` logs
- :mod:`kvgate.measure.runner`   settle, start CMD in its own process group, sample until exit
- :mod:`kvgate.measure.report`   the live status line and the text summary
- :mod:`kvgate.commands._measure`  options and steps shared by ``measure`` and ``run``
"""
