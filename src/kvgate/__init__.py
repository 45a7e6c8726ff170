"""kvgate: measure before you build a KV-cache memory optimization.

Library API (no torch anywhere in the core):

- :mod:`kvgate.units`     byte parsing/formatting, IEC vs SI
- :mod:`kvgate.model`     ``ModelSpec`` from config.json / preset
- :mod:`kvgate.geometry`  KV formats x layer kinds -> bytes per token / slot
- :mod:`kvgate.gate.verdict`      verdicts, candidates, flip boundaries (pure functions)
- :mod:`kvgate.gate.record`    decision records (JSON + Markdown), atomic, recheck
"""

__version__ = "0.1.0"
