"""kvgate's reference workload: the source's int8 KV mirror (and a paged twin) on PyTorch.

An optional extra (``pip install kvgate[gpu]`` brings torch and transformers). The core
never imports this package's torch modules; the modules are split by that line:

- :mod:`kvgate.workload.config`     model config from a preset / file / directory  (no torch)
- :mod:`kvgate.workload.allocator`  slot allocator, block allocator, block tables,
                                    admission, expected mirror bytes           (no torch)
- :mod:`kvgate.workload.plan`       a stream test checked before torch loads        (no torch)
- :mod:`kvgate.workload.mirror`     contiguous int8 + f32-scale mirror, quantization (torch)
- :mod:`kvgate.workload.paged`      the paged twin: block pool + block tables       (torch)
- :mod:`kvgate.workload.attention`  attention over the quantized cache              (torch)
- :mod:`kvgate.workload.engine`     a transformers causal LM, a minimal decode loop (torch)
- :mod:`kvgate.workload.stream`     the stream test and the numerics check          (torch)

See ``docs/writeup.md`` (the mirror it reproduces) and ``benchmarks/RESULTS.md``, "Reference workload".
"""
