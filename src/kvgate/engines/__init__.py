"""Engines that preallocate their KV cache (vLLM, SGLang, llama.cpp): their startup logs
read into a pool with its basis, cross-checked against the model, gated, and watched live.

Modules: ``logtext`` (pasted-log lines, rounding intervals), ``startups`` (one startup of
one ``docker compose`` service out of a log that holds several), ``vllm_log``,
``sglang_log``, ``llamacpp_log`` (one parser per engine), ``pool`` (the logged pool as a
measurement), ``crosscheck`` (the pool recomputed from the model), ``candidates`` (the
gate for a fixed pool), ``metrics`` (Prometheus / ``/slots`` readers), ``loadgen`` (a
bounded loopback load generator sampling those metrics).
"""

from kvgate.engines.candidates import QUANT_FORMATS, engine_layout, gate_from_engine_log
from kvgate.engines.crosscheck import crosscheck
from kvgate.engines.logtext import Logged, LogNumberError, logical_lines
from kvgate.engines.pool import ENGINES, EngineLogError, EnginePool, detect_engine, read_engine_log
from kvgate.engines.startups import StartupError, select_startup

__all__ = ["ENGINES", "QUANT_FORMATS", "EngineLogError", "EnginePool", "LogNumberError", "Logged", "StartupError",
           "crosscheck", "detect_engine", "engine_layout", "gate_from_engine_log", "logical_lines", "read_engine_log",
           "select_startup"]
