#!/usr/bin/env bash
# Issues 9 and 11 on a GPU machine (run from the repo root): sampler cost and spike capture
# (before/after), `kvgate measure -- true` wall and CPU time, start-up CPU, a two-rank NCCL
# workload under `kvgate run --gpu all` (when 2 GPUs are there), and projection checks at
# 2, 4, 8 sequences on two random-weight transformers workloads.
#   bash benchmarks/device_issue9_11.sh OUTDIR [steps]   (steps: any of cost spike wall tp2 proj)
# Writes OUTDIR/issue9_11.tar.gz (re-packed after each step) and OUTDIR/log.txt.
set -u
OUT=${1:?usage: bash benchmarks/device_issue9_11.sh OUTDIR [steps]}
STEPS=${2:-"cost spike wall tp2 proj"}
R=/tmp/issue9_11; rm -rf $R; mkdir -p $R $OUT
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-$(command -v python3)}
K="$PY -m kvgate"
log() { echo "== $* $(date -u +%T)" | tee -a $R/log.txt; }
pack() { log "$@"; tar czf $OUT/issue9_11.tar.gz -C /tmp issue9_11; cp $R/log.txt $OUT/log.txt; }
has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
{ nvidia-smi -L; nproc; $PY -c "import torch, transformers, pynvml; print(torch.__version__, transformers.__version__, torch.cuda.device_count())"; } > $R/env.txt 2>&1
NGPU=$(nvidia-smi -L | wc -l)
log "start, $NGPU GPU(s), $(nproc) cores"

if has cost; then
  timeout 90 $PY benchmarks/sampler_cost.py --out $R/sampler_cost.json --intervals ${COST_IV:-1,2} --seconds 3 >> $R/log.txt 2>&1
  pack "sampler_cost rc=$?"
fi
if has spike; then
  timeout 120 $PY benchmarks/spike_capture.py --out $R/spike_capture.json --intervals ${SPIKE_IV:-0.5,1,2} --reps ${SPIKE_REPS:-12} --smi-log $R/spikes_smi.csv >> $R/log.txt 2>&1
  pack "spike_capture rc=$?"
fi
if has wall; then
  # wall and CPU of `kvgate measure -- true`: the tree's default settle, then --settle 0s; twice each
  for s in default 0.25s 0s default 0.25s 0s; do
    a=(); [ $s != default ] && a=(--settle $s)
    /usr/bin/time -f "measure -- true, settle $s: %e s wall, %U s user, %S s sys" $K measure "${a[@]}" --out $R/true_$s.json --force -- true >> $R/log.txt 2>&1
  done
  KVGATE_NATIVE_SAMPLER=0 /usr/bin/time -f "measure -- true, settle default, Python loop: %e s wall, %U s user, %S s sys" $K measure --out $R/true_py.json --force -- true >> $R/log.txt 2>&1
  /usr/bin/time -f "import numpy: %e s wall, %U s user, %S s sys" $PY -c "import numpy" >> $R/log.txt 2>&1
  OPENBLAS_NUM_THREADS=1 /usr/bin/time -f "import numpy, OPENBLAS_NUM_THREADS=1: %e s wall, %U s user, %S s sys" $PY -c "import numpy" >> $R/log.txt 2>&1
  /usr/bin/time -f "kvgate --version: %e s wall, %U s user, %S s sys" $K --version >> $R/log.txt 2>&1
  $PY -X importtime -m kvgate measure --settle 0s --out $R/true_imp.json --force -- true 2> $R/importtime.txt >/dev/null
  sort -t'|' -k2 -n $R/importtime.txt | tail -15 >> $R/log.txt
  # a 10 s sleep under the default settle: CPU of the whole kvgate process while it samples
  /usr/bin/time -f "measure -- sleep 10: %e s wall, %U s user, %S s sys" $K measure --out $R/sleep10.json --force -- sleep 10 >> $R/log.txt 2>&1
  /usr/bin/time -f "measure --domain host -- sleep 10: %e s wall, %U s user, %S s sys" $K measure --domain host --out $R/sleep10_host.json --force -- sleep 10 >> $R/log.txt 2>&1
  pack "wall"
fi
if has tp2 && [ "$NGPU" -ge 2 ]; then
  T=$R/h200x2-tp2; mkdir -p $T
  timeout 150 $K run --gpu all --model llama-3.1-8b --tp 2 --max-seq 8192 --slots-measured 1 --slots 8 \
    --out $T/record.json --measurement-out $T/measurement.json --plot $T/run.png \
    -- torchrun --standalone --nproc-per-node 2 benchmarks/tp2_workload.py > $T/run.txt 2>&1
  pack "tp2 kvgate run rc=$?"
  tail -30 $T/run.txt >> $R/log.txt
fi
if has proj; then
  W="$PY benchmarks/hf_static_workload.py"
  # name preset max_cache_len prompt_len slot_bytes (layers × 2 × kv_heads × head_dim × 2 B × max_cache_len)
  for spec in "llama8b-16k llama-3.1-8b 16384 2000 $((32*2*8*128*2*16384))" "qwen3-4b-4k qwen3-4b 4096 1000 $((36*2*8*128*2*4096))"; do
    set -- $spec; P=$R/proj-$1; mkdir -p $P
    WA="$W --preset $2 --max-cache-len $3 --prompt-len $4 --new-tokens 16"
    timeout 200 $K run --model $2 --max-seq $3 --slots-measured 4 --slots 8 --concurrency 2,4 \
      --out $P/record.json --measurement-out $P/run.json --plot $P/run.png -- $WA --streams {n} > $P/run.txt 2>&1
    rc=$?; pack "proj $1 kvgate run rc=$rc"
    ls $P >> $R/log.txt
    if [ ! -f $P/run-n2.json ] || [ ! -f $P/run-n4.json ]; then
      for n in 2 4; do timeout 100 $K measure --out $P/run-n$n.json --force -- $WA --streams $n > $P/measure_n$n.txt 2>&1; done
    fi
    timeout 100 $K measure --out $P/measure_n8.json --plot $P/measure_n8.png -- $WA --streams 8 > $P/measure_n8.txt 2>&1
    pack "proj $1 measure n8 rc=$?"
    $PY benchmarks/projection_check.py --name $1 --slot-bytes $5 --levels 2,4,8 $P/run-n2.json $P/run-n4.json $P/measure_n8.json \
      $( [ -f $P/record.json ] && echo --record $P/record.json ) > $P/projection.txt 2>&1
    cat $P/projection.txt >> $R/log.txt
    pack "proj $1 done"
  done
fi
pack "end"
