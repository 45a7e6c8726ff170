"""Non-torch memory that tensor parallelism adds: NCCL and custom all-reduce buffers.

vLLM counts as "non-torch memory" whatever the GPU has in use beyond torch's allocator that
grew between the worker's first snapshot and the end of the profile run
(``vllm/utils`` ``memory_profiling``: ``non_torch_increase = (cuda used − torch reserved)
after − before``; V0 ``vllm/worker/worker.py`` 0.6.5 … 0.10, V1
``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory`` from 0.9.1). At TP 1 that is
cuBLAS/cuDNN workspaces and the CUDA context's growth (the band of
:mod:`kvgate.engines.vllm.budget`). At TP ≥ 2 two more things land in it:

- **Custom all-reduce** (``vllm/distributed/device_communicators/custom_all_reduce.py``,
  ``CustomAllreduce.__init__(…, max_size=8192 * 1024)``): each rank ``cudaMalloc``\\ s one
  shared buffer of ``meta_size() + max_size`` (8 MiB + a few KiB) and opens its peers' by IPC
  (no local memory); ``rank_data`` (8 MiB) is a torch tensor, counted as torch memory. Only
  for world sizes 2, 4, 6, 8 on one node, and with more than two GPUs only when they are all
  NVLink-connected (``world_size > 2 and not fully_connected`` disables it). At most 16 MiB
  non-torch: :data:`CUSTOM_AR`.
- **NCCL** (``pynccl.py`` ``PyNcclCommunicator`` and torch's NCCL process group): the
  communicator's channel buffers (``NCCL_BUFFSIZE`` 4 MiB per channel, peer and protocol)
  and, on NVSwitch systems (H100/H200/B200 SXM, A100 SXM through NVLink), the NVLS
  multicast buffers. NCCL sets connections up lazily, at the first collective of each
  algorithm (``NCCL_RUNTIME_CONNECT=1``, the default since NCCL 2.22), so the profile run's
  large all-reduces allocate buffers after the snapshot even in releases that take the
  snapshot after ``init_worker_distributed_environment`` (0.10 and later: "Initialize the
  distributed environment BEFORE taking memory snapshot"). NCCL's buffer sizes are NCCL's,
  not vLLM's, so this part is a band from startup logs that print the term, by card class:

  * **NVLink data-centre cards** (H100/H800/H200/B200/GH200/A100/A800): the one public
    log pair of the same run at TP 1 and TP 2 (vllm-project/vllm#10511, Llama-3-8B, H100,
    0.6.5 branch: 1.79 → 3.58 GiB) puts it at +1.79 GiB; the reserved 0.19 H100 set of issue
    25 reports "about 2 GiB" at TP 2, 4 and 8. The same names cover PCIe boards (H100 PCIe,
    A100 PCIe: no NVSwitch, PCIe-sized NCCL buffers), so the band starts at the PCIe value:
    :data:`NCCL_NVLINK` = [0, 2.5 GiB].
  * **PCIe cards** (GeForce, RTX workstation, L40S, L4, A10, T4): RTX 4090 TP 2 0.25 GiB
    (vllm#13061), RTX 3090 TP 8 0.20 GiB (vllm#14447, #15340), L40S TP 2 0.30 GiB
    (vllm#15815) in all, inside the TP 1 band already; NCCL over PCIe/SHM uses its default
    4 MiB buffers: :data:`NCCL_PCIE` = [0, 128 MiB].
  * a card known only by its total: the hull of both.

Pipeline parallelism alone (TP 1, PP ≥ 2) opens point-to-point NCCL connections only, the
PCIe band.
"""

from __future__ import annotations

from kvgate.fit.interval import Interval, Term

MiB = 2**20
GiB = 2**30

#: custom all-reduce: one cudaMalloc'd shared buffer of meta + 8 MiB per rank (code), rounded up
CUSTOM_AR = Interval(0, 16 * MiB)
#: NCCL buffers at TP ≥ 2 on NVLink/NVSwitch data-centre cards (module docstring)
NCCL_NVLINK = Interval(0, 2560 * MiB)
#: NCCL buffers at TP ≥ 2 over PCIe (module docstring)
NCCL_PCIE = Interval(0, 128 * MiB)

#: card-name prefixes of the NVLink-capable data-centre families (kvgate.fit.gpus names)
_NVLINK = ("H100", "H800", "H200", "H20", "B200", "B300", "GB200", "GH200", "A100", "A800")
#: card names that are PCIe-only boards
_PCIE = ("RTX", "L40", "L4", "A10", "A40", "T4", "V100 16GB", "Quadro", "A4000", "A5000", "A6000")


def card_class(gpu_name: str | None) -> str:
    """``"nvlink"``, ``"pcie"`` or ``"unknown"`` for a card name of :mod:`kvgate.fit.gpus`
    (``H100 NVL`` is a PCIe board bridged in pairs: ``nvlink``, the wider band)."""
    if not gpu_name:
        return "unknown"
    n = gpu_name.strip()
    if n.startswith(_NVLINK):
        return "nvlink"
    if n.startswith(_PCIE) or n.upper().startswith(("RTX", "GTX")):
        return "pcie"
    return "unknown"


def tp_comm_term(tp: int, pp: int = 1, gpu_name: str | None = None) -> Term | None:
    """The non-torch memory TP adds on each rank (module docstring), or ``None`` at TP 1 and
    PP 1."""
    if tp <= 1 and pp <= 1:
        return None
    cls = card_class(gpu_name)
    if tp <= 1:
        return Term("NCCL (pipeline stages)", NCCL_PCIE, "point-to-point NCCL buffers between stages, PCIe-sized")
    nccl = {"nvlink": NCCL_NVLINK, "pcie": NCCL_PCIE}.get(cls, Interval(0, NCCL_NVLINK.high))
    v = nccl + CUSTOM_AR
    src = (f"TP {tp}: custom all-reduce ≤ 16 MiB (custom_all_reduce.py max_size 8 MiB + meta) + NCCL "
           f"buffers, {cls} card band [{nccl.low // MiB}, {nccl.high // MiB}] MiB from logs printing the term")
    return Term("NCCL + custom all-reduce (TP)", v, src)


__all__ = ["CUSTOM_AR", "NCCL_NVLINK", "NCCL_PCIE", "card_class", "tp_comm_term"]
