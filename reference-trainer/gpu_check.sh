#!/usr/bin/env bash
# The trainer's GPU check, for the H200 machine (no Rust there: build here and carry). From the
# repository root:
#
#   here:   cargo fetch && bash ../shared/gpu/cuda-buildenv.sh "$HOME/.cache/t2po-cudaenv"
#           . "$HOME/.cache/t2po-cudaenv/env.sh"
#           CARGO_TARGET_DIR=target-cuda cargo build --release -p reference-trainer --features cuda
#           mkdir -p .gpu/cache && cp target-cuda/release/reference-trainer .gpu/ && strip .gpu/reference-trainer
#           xz -T2 .gpu/reference-trainer                   # 73 MB → ~10 MB (the transfer holds 64 MiB)
#           cp -r RUN/cold-start .gpu/cold-start            # a main-job cold start (seed 2026)
#           cp -r ~/.cache/t2po/search-index-v2-seed2026-passages30000 .gpu/cache/
#   there:  bash reference-trainer/gpu_check.sh             (device tool: carry [".gpu"])
#
# 1. `generate` on the GPU and on the CPU, same seed and episodes: do both run, and do they agree.
# 2. RL from the cold start (3 iterations, held-out evaluation before and after) on the GPU and on
#    the CPU of the same machine: wall time per stage and the figures, side by side.
set -uo pipefail
OUT="${OUT:-$(mktemp -d)}"
BIN="${T2PO_TRAINER_BIN:-.gpu/reference-trainer}"
if [ ! -x "$BIN" ] && [ -f "$BIN.xz" ]; then
  xz -dk "$BIN.xz" && chmod +x "$BIN"
fi
TORCH_LIB=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null || true)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${TORCH_LIB}:${LD_LIBRARY_PATH:-}"
export T2PO_CACHE="$PWD/.gpu/cache"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "cpu cores: $(nproc)"
status=0
for dev in cuda cpu; do
  echo "== generate --device $dev"
  s=$(date +%s%N)
  timeout 90 "$BIN" generate --env search --episodes 8 --seed 7 --checkpoint .gpu/cold-start \
    --temperature 0 --device "$dev" --jsonl "$OUT/generate_$dev.jsonl" >"$OUT/generate_$dev.log" 2>&1
  rc=$?; [ "$rc" -ne 0 ] && status=1
  echo "exit $rc, $(( ($(date +%s%N) - s) / 1000000 )) ms"; tail -n 4 "$OUT/generate_$dev.log"
done
python3 - "$OUT" <<'EOF' || status=1
import json, sys
out = sys.argv[1]
def recs(dev):
    return [json.loads(l) for l in open(f"{out}/generate_{dev}.jsonl")]
a, b = recs("cuda"), recs("cpu")
ids = lambda r: [t["generation"]["response_ids"] for t in r["turns"]]
same = sum(ids(x) == ids(y) for x, y in zip(a, b))
lp = [abs(p - q) for x, y in zip(a, b) if ids(x) == ids(y)
      for s, t in zip(x["turns"], y["turns"])
      for p, q in zip(s["generation"]["log_probs"], t["generation"]["log_probs"])]
print(f"greedy episodes with the same tokens on GPU and CPU: {same} of {len(a)} (records {len(a)}/{len(b)}); "
      f"successes {sum(r['success'] for r in a)} / {sum(r['success'] for r in b)}; "
      f"max |log-prob difference| over identical episodes {max(lp, default=float('nan')):.2e}")
EOF
for dev in cuda cpu; do
  echo "== train (RL from the cold start, 3 iterations) --device $dev"
  s=$(date +%s%N)
  timeout 150 "$BIN" train --init .gpu/cold-start --no-cold-start --iterations 3 --quiet \
    --device "$dev" --out "/tmp/rl_$dev" >"$OUT/train_$dev.log" 2>&1
  rc=$?; [ "$rc" -ne 0 ] && status=1
  echo "exit $rc, $(( ($(date +%s%N) - s) / 1000000 )) ms"; tail -n 25 "$OUT/train_$dev.log"
  cp "/tmp/rl_$dev/metrics.jsonl" "$OUT/metrics_$dev.jsonl" 2>/dev/null || true
done
exit "$status"
