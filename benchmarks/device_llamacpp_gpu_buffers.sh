#!/bin/bash
# kvgate issues 26 item 4 / 25 item 6 (GPU part): build the pinned llama.cpp's CUDA llama-server
# (0c1e57098bba: vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist, trimmed of models/, docs/,
# tests/, examples/, gguf-py/ and the non-CUDA GPU backends) and run benchmarks/llamacpp_gpu_buffers.py
# over zero-weight GGUFs. Carried folder C (git-ignored, default build/h6) holds: llama.cpp.tar.gz,
# gguf/ (headers + SIZES.txt from `llamacpp_gpu_buffers.py headers`), llamacpp_gpu_buffers.py.
# Usage on the device, from the repo root: bash build/h6/run.sh   (OUT set by the device tool)
# ONLY=id,id… runs those cases (CASES and DIAG of the .py) in that order; SKIP=id,… leaves some out;
# a second call on the still-warm machine reuses /tmp/lcb (no rebuild).
T0=$(date +%s)
TOTAL=${TOTAL:-585}
C=${C:-$(pwd)/build/h6}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
S="$OUT/summary.txt"
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$S"; }
log "start $(date -u)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee -a "$S"
nvcc --version | tail -1 | tee -a "$S"; echo "cores: $(nproc); host memory: $(free -g | awk '/Mem/{print $2}') GiB" | tee -a "$S"
if [ ! -x /tmp/lcb/bin/llama-server ]; then
  mkdir -p /tmp/lcsrc && tar xzf "$C/llama.cpp.tar.gz" -C /tmp/lcsrc
  cmake -S /tmp/lcsrc/llama.cpp -B /tmp/lcb -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF > "$OUT/build.log" 2>&1 || { log "configure FAILED"; tail -40 "$OUT/build.log"; exit 1; }
  B0=$(date +%s)
  timeout ${BUILD_TIMEOUT:-400} cmake --build /tmp/lcb -j"$(nproc)" --target llama-server >> "$OUT/build.log" 2>&1
  rc=$?; log "build rc=$rc in $(( $(date +%s) - B0 ))s"
  [ -x /tmp/lcb/bin/llama-server ] || { tail -30 "$OUT/build.log"; exit 2; }
fi
LEFT=$(( TOTAL - ( $(date +%s) - T0 ) ))
log "runs, ${LEFT}s left"
mkdir -p /tmp/gg && cp "$C"/gguf/* /tmp/gg/
rm -rf /tmp/res  # a warm machine keeps the last call's logs
PYTHONUNBUFFERED=1 python3 "$C/llamacpp_gpu_buffers.py" run /tmp/gg --server /tmp/lcb/bin/llama-server \
  --out /tmp/res --budget $(( LEFT - 25 )) ${ONLY:+--only "$ONLY"} ${SKIP:+--skip "$SKIP"} 2>&1 | tee -a "$S"
cp /tmp/res/runs.json "$OUT/" 2>/dev/null
(cd /tmp/res && tar czf "$OUT/logs.tar.gz" *.log) 2>/dev/null
gzip -c "$OUT/build.log" > "$OUT/build.log.gz"; rm -f "$OUT/build.log"
log "done"
