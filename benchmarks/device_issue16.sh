#!/usr/bin/env bash
# Issue 16 #6 on a GPU machine (H200): the GPU sampler is a Python loop (no C compiled at run
# time). One call: thread-level sampler cost, whole-process cost of `kvgate measure -- sleep 30`
# minus `-- true` (before = the C loop of BEFORE_SRC, after = this tree, at 1, 1.5 and 2 ms),
# and spike capture of spikes held 1, 2, 5 and 20 ms.
#   bash benchmarks/device_issue16.sh OUTDIR [BEFORE_SRC]
# Writes OUTDIR/{env.txt,log.txt,sampler_cost.json,measure_cost_before.json,measure_cost_after.json,
# spike_capture.json,spikes_smi.csv}.
set -u
OUT=${1:?usage: bash benchmarks/device_issue16.sh OUTDIR [BEFORE_SRC]}
BEFORE=${2:-}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-$(command -v python3)}
log() { echo "== $* $(date -u +%T)" | tee -a "$OUT/log.txt"; }
{ nvidia-smi -L; nproc; uname -r; $PY -c "import sys, torch, pynvml, psutil; print(sys.version.split()[0], torch.__version__)"
  command -v cc gcc; } > "$OUT/env.txt" 2>&1
log "start"
timeout 80 $PY benchmarks/sampler_cost.py --out "$OUT/sampler_cost.json" --intervals 1,1.5,2 --seconds 3 2>&1 | tee -a "$OUT/log.txt"
log "sampler_cost"
if [ -n "$BEFORE" ]; then
  timeout 80 $PY benchmarks/measure_cost.py --out "$OUT/measure_cost_before.json" --src "$BEFORE" --label "before (C loop)" \
    --seconds 30 2>&1 | tee -a "$OUT/log.txt"
  log "measure_cost before"
fi
timeout 150 $PY benchmarks/measure_cost.py --out "$OUT/measure_cost_after.json" --label "after (Python loop)" \
  --intervals default,1.5,2 --seconds 30 2>&1 | tee -a "$OUT/log.txt"
log "measure_cost after"
timeout 100 $PY benchmarks/spike_capture.py --out "$OUT/spike_capture.json" --intervals 1,1.5,2 --holds 1,2,5,20 \
  --reps 15 --smi-log "$OUT/spikes_smi.csv" 2>&1 | tee -a "$OUT/log.txt"
log "spike_capture"
