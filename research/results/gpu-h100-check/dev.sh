#!/bin/bash
# The GPU check of issue 16 on the device machine: build llama-cpp-python with CUDA (flags
# from scripts/build_flags.py), receive the demo GGUFs in chunks, then run specem there.
set -u
export PYTHONPATH=/tmp/llama:/tmp/site:/tmp/pkgs:$PWD PYTHONUNBUFFERED=1
case "$1" in
start)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .device/whl/*.whl
  mkdir -p /tmp/b /tmp/m /tmp/pkgs
  ln -sfn "$PWD/research" /tmp/pkgs/specem_research; ln -sfn "$PWD/tui" /tmp/pkgs/specem_tui
  tar xzf .device/llama_cpp_python-0.3.36.tar.gz -C /tmp/b
  FLAGS=$(CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real -DLLAVA_BUILD=OFF" python3 scripts/build_flags.py)
  echo "CMAKE_ARGS=$FLAGS" | tee /tmp/flags; grep -o -w -m1 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | head -3
  cd /tmp/b/llama_cpp_python-0.3.36
  setsid nohup env CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-deps \
    --no-build-isolation --no-cache-dir --target /tmp/llama . > /tmp/build.log 2>&1 < /dev/null &
  ;;
add)
  mkdir -p /tmp/m/parts; cp "$2" /tmp/m/parts/; ls -la /tmp/m/parts; tail -c 400 /tmp/build.log ;;
check)
  cat /tmp/m/parts/smol.* > /tmp/m/smol.gguf; cat /tmp/m/parts/gemma.* > /tmp/m/gemma.gguf
  sha256sum /tmp/m/*.gguf; tail -c 300 /tmp/build.log; ls /tmp/llama | head
  printf '[[models]]\nname = "gemma"\npath = "/tmp/m/gemma.gguf"\n[[models]]\nname = "smol"\npath = "/tmp/m/smol.gguf"\n' > /tmp/dev.toml
  S="python3 -m specem_local.cli"
  $S models list --config /tmp/dev.toml 2>&1 | tee "$OUT/models-list.txt"
  $S run --config /tmp/dev.toml --greedy --json --max-tokens 48 "Why is the sky blue?" > "$OUT/run.jsonl" 2> "$OUT/run.err"; echo "run rc=$?"; tail -c 600 "$OUT/run.jsonl"; cat "$OUT/run.err"
  python3 -c "
import numpy
from specem_local import Ensemble
from specem_local.config import load_config
with Ensemble.from_config(load_config('/tmp/dev.toml'), max_tokens=8, greedy=True) as e:
    print('numpy first:', e.generate('Hi').tokens, [m.model.placement for m in e.members])
"; echo "numpy-first rc=$?"
  $S bench --quick --config /tmp/dev.toml --output "$OUT/bench-quick.json" 2>&1 | tee "$OUT/bench-quick.txt" | tail -30
  ;;
esac
