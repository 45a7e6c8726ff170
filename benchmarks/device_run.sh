#!/usr/bin/env bash
# Issue 3 on a GPU machine (H200): sampler cost, spike capture, real nvidia-smi logs in
# several formats (test fixtures), `kvgate run` 2,4 -> 8 on Qwen3-30B-A3B and a measured
# run at 8. Run from the repo root: bash benchmarks/device_run.sh OUTDIR
# Writes OUTDIR/issue3.tar.gz (everything, re-packed after each step) and OUTDIR/log.txt.
set -u
OUT=${1:?usage: bash benchmarks/device_run.sh OUTDIR}
R=/tmp/issue3; rm -rf $R; mkdir -p $R $OUT
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
PY=${PYTHON:-$(command -v python || command -v python3)}
pack() { echo "== $* $(date -u +%T)" >> $R/log.txt; tar czf $OUT/issue3.tar.gz -C /tmp issue3; cp $R/log.txt $OUT/log.txt; }
W="$PY benchmarks/hf_static_workload.py"
{ nvidia-smi; nvidia-smi -q -d MEMORY; $PY -c "import torch, transformers, pynvml; print(torch.__version__, transformers.__version__)"; } > $R/env.txt 2>&1
$PY benchmarks/nvml_check.py --out $R/nvml_check.json >> $R/log.txt 2>&1; pack "nvml_check rc=$?"
timeout 60 $PY benchmarks/sampler_cost.py --out $R/sampler_cost.json >> $R/log.txt 2>&1; pack "sampler_cost rc=$?"
timeout 100 $PY benchmarks/spike_capture.py --out $R/spike_capture.json --smi-log $R/h200_spikes_lms500_nounits.csv >> $R/log.txt 2>&1; pack "spike_capture rc=$?"
Q=timestamp,index,name,uuid,driver_version,memory.total,memory.used,memory.free,memory.reserved
# stdbuf -oL: lines reach the file as they are printed, so SIGTERM loses nothing
# (background jobs of a script ignore SIGINT, which nvidia-smi would handle itself)
stdbuf -oL nvidia-smi --query-gpu=$Q --format=csv -lms 200 > $R/h200_run_units.csv & S1=$!
stdbuf -oL nvidia-smi --query-gpu=memory.used,timestamp,memory.total,index,memory.reserved --format=csv,nounits -lms 250 > $R/h200_run_nounits_reordered.csv & S2=$!
stdbuf -oL nvidia-smi --query-gpu=index,memory.total,memory.used --format=csv,noheader -l 1 > $R/h200_run_noheader_l1.csv & S3=$!
timeout 300 $PY -m kvgate run --model qwen3-30b-a3b --max-seq 8192 --slots-measured 4 --slots 8 --concurrency 2,4 \
  --out $R/record.json --measurement-out $R/run.json --plot $R/run.png -- $W --streams {n} > $R/run.txt 2>&1
pack "kvgate run rc=$?"
timeout 150 $PY -m kvgate measure --out $R/measure_n8.json --plot $R/measure_n8.png -- $W --streams 8 > $R/measure_n8.txt 2>&1
pack "measure n8 rc=$?"
kill $S1 $S2 $S3; wait $S1 $S2 $S3 2>/dev/null
$PY benchmarks/compare_projection.py $R/record.json $R/measure_n8.json >> $R/log.txt 2>&1
for f in $R/h200_*.csv; do c=; case $f in *noheader*) c="--columns index,memory.total,memory.used";; esac
  $PY -m kvgate import-smi $f $c >> $R/import.txt 2>&1; echo "import $f rc=$?" >> $R/log.txt; done
$PY -m kvgate measure -- no-such-cmd-xyz >> $R/log.txt 2>&1; echo "missing cmd rc=$?" >> $R/log.txt
if $PY -c "import pytest" 2>/dev/null; then $PY -m pytest -q -p no:cacheprovider tests/test_measure_*.py >> $R/log.txt 2>&1; pack "pytest rc=$?"
else $PY -m kvgate measure --settle 0.5s --out $R/measure_idle.json -- sleep 1 >> $R/log.txt 2>&1; pack "no pytest here; kvgate measure -- sleep 1 rc=$?"; fi
