"""The write-up's case (seed/SEED-en.md), the embedded default of ``kvgate demo``.

x86-64 + NVIDIA RTX 5090, Qwen3-30B-A3B (local 4-bit weights), KV mirror
``int8-f32scale`` at max_seq 8192, stream test with 4 streams, slot cap 8,
``nvidia-smi`` sampled every 500 ms: memory.total 32,607 MiB, idle 936 MiB,
peak 19,625 MiB.
"""

from __future__ import annotations

from kvgate.measure.measurement import Basis, Measurement
from kvgate.units import MiB

MODEL = "qwen3-30b-a3b"
KV_FORMAT = "int8-f32scale"
MAX_SEQ = 8192
SLOTS_MEASURED = 4
SLOTS_TARGET = 8
TOTAL_BYTES = 32_607 * MiB
IDLE_BYTES = 936 * MiB
PEAK_BYTES = 19_625 * MiB

# Where the write-up's printed figures differ from its own arithmetic.
ERRATA = [
    "the write-up prints 9.5% for all 8 slots; 3,168 MiB / 32,607 MiB = 9.7% "
    "(it divided 3.09 GiB by the card's 32.6 GB)",
    "the write-up prints \"1.98 GiB\" for one slot at max_seq 40,960; that slot is "
    "2,076,180,480 B = 1,980 MiB = 1.93 GiB (1,980 MiB is not 1.98 GiB)",
]


def measurement() -> Measurement:
    """The write-up's measurement, with the basis it states."""
    return Measurement(
        total_bytes=TOTAL_BYTES,
        peak_used_bytes=PEAK_BYTES,
        idle_used_bytes=IDLE_BYTES,
        basis=Basis(
            domain="gpu:0",
            device_name="NVIDIA GeForce RTX 5090",
            total_bytes=TOTAL_BYTES,
            cpu_arch="x86_64",
            sampler="nvidia-smi",
            interval_s=0.5,
            command=["vllm_kestrel_x64.exe", "--cuda", "--model", "<30B-A3B-q4local>", "--stream-test",
                     "--stream-n", "4"],
            exit_code=0,
            source="the write-up (part 21), measured with nvidia-smi every 500 ms",
        ),
    )
