#!/usr/bin/env bash
# The whole GPU check of t2po-cuda in one command, for the H200 machine (no Rust there: build the
# check binary here and carry it). Run from the repository root:
#
#   here:   cargo build --release -p t2po-cuda --bin t2po_cuda_check
#           mkdir -p .gpu && cp target/release/t2po_cuda_check .gpu/ && strip .gpu/t2po_cuda_check
#   there:  bash t2po-cuda/gpu_check.sh          (device tool: carry [".gpu"])
#
# Prints the check binary's correctness results and speed table, the PyTorch peer's table,
# ptxas register/spill figures, and compute-sanitizer (memcheck, racecheck) results when present.
set -uo pipefail
OUT="${OUT:-$(mktemp -d)}"
BIN="${T2PO_CHECK_BIN:-.gpu/t2po_cuda_check}"
# NVRTC 13.0 from the toolkit (a newer one emits PTX the 13.0 driver rejects) and the torch wheels.
TORCH_LIB=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null || true)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${TORCH_LIB}:${LD_LIBRARY_PATH:-}"
export OUT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
echo "== t2po-cuda check"
timeout 300 "$BIN" || status=$?
echo "== ptxas -v (sm_90)"
if [ -x /usr/local/cuda/bin/ptxas ] && [ -f "$OUT/t2po_kernels.ptx" ]; then
  /usr/local/cuda/bin/ptxas -arch=sm_90 -v "$OUT/t2po_kernels.ptx" -o /dev/null 2>&1 | grep -E "Compiling entry|registers|spill"
fi
echo "== compute-sanitizer"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$SAN" ]; then
  for tool in memcheck racecheck; do
    T2PO_CHECK_QUICK=1 timeout 240 "$SAN" --tool "$tool" --error-exitcode 9 "$BIN" >"$OUT/sanitizer_$tool.log" 2>&1
    rc=$?
    echo "$tool: exit $rc ($(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$OUT/sanitizer_$tool.log") clean summaries)"
    tail -n 3 "$OUT/sanitizer_$tool.log"
    [ "$rc" -eq 9 ] && status=1
  done
else
  echo "compute-sanitizer not found"
fi
echo "== PyTorch peer (eager and torch.compile)"
timeout 240 python3 t2po-cuda/bench/torch_control_baseline.py || echo "torch baseline failed"
echo "== summary: compare 't2po step' with 'eager full' and 'compiled stats' rows above"
exit "$status"
