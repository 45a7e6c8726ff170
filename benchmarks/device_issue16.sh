#!/usr/bin/env bash
# Issue 16 #6 on a GPU machine (H200): the GPU sampler is a Python loop (no C compiled at run
# time). Thread-level sampler cost, whole-process cost of `kvgate measure -- sleep 30` minus
# `-- true` (before = the C loop of BEFORE_SRC, after = this tree), and spike capture.
#   [STEPS="cost before after pin spike"] bash benchmarks/device_issue16.sh OUTDIR [BEFORE_SRC]
# Knobs (env): COST_IV, AFTER_IV, PIN_IV (ms lists; AFTER_IV may hold "default"), PIN_SECONDS,
# SPIKE_IV, HOLDS (ms), REPS. Writes OUTDIR/{env.txt,log.txt,sampler_cost.json,
# measure_cost_before.json,measure_cost_after.json,measure_cost_pinned.json,spike_capture.json,spikes_smi.csv}.
set -u
OUT=${1:?usage: bash benchmarks/device_issue16.sh OUTDIR [BEFORE_SRC]}
BEFORE=${2:-}
STEPS=${STEPS:-"cost before after spike"}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-$(command -v python3)}
log() { echo "== $* $(date -u +%T)" | tee -a "$OUT/log.txt"; }
has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
{ nvidia-smi -L; nproc; uname -r; $PY -c "import sys, torch, pynvml, psutil; print(sys.version.split()[0], torch.__version__)"
  command -v cc gcc; } > "$OUT/env.txt" 2>&1
log "start: $STEPS"
if has cost; then
  timeout 80 $PY benchmarks/sampler_cost.py --out "$OUT/sampler_cost.json" --intervals "${COST_IV:-1,1.5,2}" --seconds 3 2>&1 | tee -a "$OUT/log.txt"
  log "sampler_cost"
fi
if has before && [ -n "$BEFORE" ]; then
  timeout 80 $PY benchmarks/measure_cost.py --out "$OUT/measure_cost_before.json" --src "$BEFORE" --label "before (C loop)" \
    --seconds 30 2>&1 | tee -a "$OUT/log.txt"
  log "measure_cost before"
fi
if has after; then
  timeout 150 $PY benchmarks/measure_cost.py --out "$OUT/measure_cost_after.json" --label "after (Python loop)" \
    --intervals "${AFTER_IV:-default,1.5,2}" --seconds 30 2>&1 | tee -a "$OUT/log.txt"
  log "measure_cost after"
fi
if has pin; then
  timeout 120 $PY benchmarks/measure_cost.py --out "$OUT/measure_cost_pinned.json" --label "Python loop, thread pinned" --pin \
    --intervals "${PIN_IV:-1,2}" --seconds "${PIN_SECONDS:-30}" 2>&1 | tee -a "$OUT/log.txt"
  log "measure_cost pinned"
fi
if has spike; then
  timeout 100 $PY benchmarks/spike_capture.py --out "$OUT/spike_capture.json" --intervals "${SPIKE_IV:-1,1.5,2}" \
    --holds "${HOLDS:-1,2,5,20}" --reps "${REPS:-15}" --smi-log "$OUT/spikes_smi.csv" 2>&1 | tee -a "$OUT/log.txt"
  log "spike_capture"
fi
