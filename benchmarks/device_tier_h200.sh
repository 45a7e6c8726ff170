#!/bin/bash
# kvgate issue 17 item 5 (GPU part): CUDA llama-server (pinned llama.cpp) with --cache-ram,
# -ngl 99, Mooncake trace as prompts, via benchmarks/tier_llama_server.py (unchanged).
# Usage (repo root on the device): bash .devcarry/run.sh   [BUILD_TIMEOUT=secs] [TOTAL=secs]
# .devcarry/ (git-excluded, carried by the device tool) holds: this script as run.sh; llama.cpp.tar.gz
# (the vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist, i.e. 0c1e57098bba, trimmed of models/,
# tests/, docs/, examples/); whl/gguf-0.19.0 (the device has no gguf); the Mooncake trace; and
# llama-server-gpu, a wrapper: exec /tmp/lcb/bin/llama-server "$@" -ngl 99.
T0=$(date +%s)
TOTAL=${TOTAL:-585}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-440}
D=$(pwd)/.devcarry
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
S="$OUT/summary.txt"
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$S"; }
log "start $(date -u)"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
nvcc --version | tail -1 | tee -a "$S"; echo "cores: $(nproc)" | tee -a "$S"

# --- wheels
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$D"/whl/*.whl >>"$S" 2>&1 || { log "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site

# --- build (kept in /tmp/lcb: a warm machine's second call resumes it)
if [ ! -x /tmp/lcb/bin/llama-server ]; then
  if [ ! -d /tmp/lcsrc/llama.cpp ]; then mkdir -p /tmp/lcsrc && tar xzf "$D/llama.cpp.tar.gz" -C /tmp/lcsrc; fi
  G=""; command -v ninja >/dev/null && G="-G Ninja"
  if [ ! -f /tmp/lcb/CMakeCache.txt ]; then
    cmake -S /tmp/lcsrc/llama.cpp -B /tmp/lcb $G -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF > "$OUT/build.log" 2>&1 \
      || { log "configure FAILED"; tail -40 "$OUT/build.log"; exit 1; }
    log "configured"
  fi
  B0=$(date +%s)
  timeout "$BUILD_TIMEOUT" cmake --build /tmp/lcb -j"$(nproc)" --target llama-server >> "$OUT/build.log" 2>&1
  rc=$?
  log "build rc=$rc in $(( $(date +%s) - B0 ))s"
  if [ $rc -ne 0 ] || [ ! -x /tmp/lcb/bin/llama-server ]; then
    tail -30 "$OUT/build.log"; grep -c "Building CUDA" "$OUT/build.log" | sed 's/^/CUDA objects started: /' | tee -a "$S"
    exit 2
  fi
else
  log "llama-server already built in /tmp/lcb"
fi
ldd /tmp/lcb/bin/llama-server | grep -i -E "cuda|cublas" | tee -a "$S"

# --- benchmark
LEFT=$(( TOTAL - ( $(date +%s) - T0 ) ))
log "benchmark, time left ${LEFT}s"
mkdir -p /tmp/res
set -o pipefail
PYTHONUNBUFFERED=1 timeout $(( LEFT - 15 )) python3 benchmarks/tier_llama_server.py --server "$D/llama-server-gpu" \
  --trace "$D/mooncake_conversation_trace.jsonl" --out /tmp/res 2>&1 | tee -a "$S"
log "benchmark rc=$?"
grep -h -E "offloaded|CUDA0|flash_attn|cache_ram|cache-ram|prompt cache" /tmp/res/tier_llama_server_0.log 2>/dev/null | head -20 >> "$S"
cp /tmp/res/tier_llama_server.json "$OUT/tier_llama_server_gpu.json" 2>/dev/null
(cd /tmp/res && tar czf "$OUT/server_logs.tar.gz" *.log) 2>/dev/null
log "done"
