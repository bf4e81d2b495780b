#!/usr/bin/env python3
"""This crate's training step and decode next to PyTorch on the same shapes, interleaved round by
round in one run (these machines are shared and noisy: compare the ratios), with the ratios.

Training step = forward + log-probs of the next tokens (cross-entropy) + backward + AdamW, f32:
the 1 M-parameter default-shaped Qwen3 (vocab 4096, d 128, 2 layers, 4 heads / 2 KV, head_dim 32,
MLP 512, tied) at 16x256 and 8x1024 tokens, and a 5 M one (d 256, 4 layers, MLP 1024) at 16x256;
PyTorch eager and torch.compile (inductor). Decode = batch 1 / 32 / 64 with a KV cache, one
multinomial draw per row (ours with the T²PO control kernel on: the rollout's direct decode step
and the candle-tensor path it replaced), PyTorch eager, and Hugging Face `generate` at batch 64 on
the same config.

    python3 reference-trainer/benches/speed_vs_torch.py [--rounds 3] [--threads 2] [--quick]

`--real` measures a real-sized model instead: SmolLM2-135M-Instruct (`scripts/fetch_smollm2.sh`
caches its GGUF; `convert` writes it once as an f32 Hugging Face folder beside it), the same
weights on both sides — decode at batch 1 / 32 / 64 (ours: the rollout's direct step, weights
packed once, control kernel on; PyTorch eager: transformers' LlamaForCausalLM with its KV cache,
one multinomial draw per row) and a training step at 8 x 256 tokens (forward, log-probs of the
next tokens, backward, AdamW) — interleaved round by round (`benches/real_model.rs`).

PyTorch and transformers come from PyPI: on first use the script creates a venv under
~/.cache/t2po-bench-venv (or $T2PO_BENCH_VENV) and installs them there (a few GB, several
minutes), then re-runs itself inside it. It is not part of CI.
"""
import argparse
import json
import os
import subprocess
import sys
import time

VENV = os.environ.get("T2PO_BENCH_VENV", os.path.expanduser("~/.cache/t2po-bench-venv"))
SMOLLM2 = os.path.expanduser("~/.cache/t2po-smollm2")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = [("1M", 128, 2, 512, 16, 256), ("1M", 128, 2, 512, 8, 1024), ("5M", 256, 4, 1024, 16, 256)]
V, EPS, THETA = 4096, 1e-6, 1e6


def best_seconds(fn, reps):
    """The fastest of `reps` timed calls of `fn` (after the caller's warm-up)."""
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def ensure_torch():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    if os.path.abspath(sys.executable) == os.path.abspath(py):
        subprocess.check_call([py, "-m", "pip", "install", "-q", "torch", "transformers", "numpy"])
    else:
        if not os.path.exists(py):
            subprocess.check_call([sys.executable, "-m", "venv", VENV])
        subprocess.check_call([py, "-m", "pip", "install", "-q", "torch", "transformers", "numpy"])
    os.execv(py, [py] + sys.argv)


def make_model(d, layers, mlp, seed=0):
    import torch
    H, KV, hd = 4, 2, d // 4

    class Qwen3(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(seed)

            def w(*shape):
                return torch.nn.Parameter(torch.randn(*shape, generator=g) * 0.02)

            def ones(n):
                return torch.nn.Parameter(torch.ones(n))

            self.emb = w(V, d)
            self.layers = torch.nn.ModuleList()
            for _ in range(layers):
                m = torch.nn.Module()
                m.ln1, m.q, m.k, m.v, m.o = ones(d), w(H * hd, d), w(KV * hd, d), w(KV * hd, d), w(d, H * hd)
                m.qn, m.kn, m.ln2 = ones(hd), ones(hd), ones(d)
                m.gate, m.up, m.down = w(mlp, d), w(mlp, d), w(d, mlp)
                self.layers.append(m)
            self.norm = ones(d)
            inv = 1.0 / (THETA ** (torch.arange(0, hd, 2).float() / hd))
            ang = torch.arange(2048).float()[:, None] * inv[None, :]
            self.register_buffer("cos", torch.cat([ang.cos()] * 2, -1))
            self.register_buffer("sin", torch.cat([ang.sin()] * 2, -1))

        def forward(self, tokens, kc=None, vc=None, pos=0):
            b, l = tokens.shape
            x = self.emb[tokens]
            c, s = self.cos[pos:pos + l], self.sin[pos:pos + l]

            def rms(x, wt):
                return wt * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))

            def rot(x):
                return torch.cat([-x[..., hd // 2:], x[..., : hd // 2]], -1)

            for i, p in enumerate(self.layers):
                h = rms(x, p.ln1)
                q = rms((h @ p.q.T).view(b, l, H, hd), p.qn).transpose(1, 2)
                k = rms((h @ p.k.T).view(b, l, KV, hd), p.kn).transpose(1, 2)
                v = (h @ p.v.T).view(b, l, KV, hd).transpose(1, 2)
                q, k = q * c + rot(q) * s, k * c + rot(k) * s
                if kc is not None:
                    kc[i][:, :, pos:pos + l] = k
                    vc[i][:, :, pos:pos + l] = v
                    k, v = kc[i][:, :, :pos + l], vc[i][:, :, :pos + l]
                att = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=l > 1, enable_gqa=True)
                x = x + att.transpose(1, 2).reshape(b, l, H * hd) @ p.o.T
                h = rms(x, p.ln2)
                x = x + (torch.nn.functional.silu(h @ p.gate.T) * (h @ p.up.T)) @ p.down.T
            return rms(x, self.norm) @ self.emb.T

    return Qwen3()


def torch_train(shape, threads, compiled, reps):
    import torch
    torch.set_num_threads(threads)
    _, d, layers, mlp, b, l = shape
    model = make_model(d, layers, mlp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def loss_of(tokens):
        logits = model(tokens[:, :-1])
        logp = torch.log_softmax(logits, -1)
        return -logp.gather(-1, tokens[:, 1:, None]).mean()

    fn = torch.compile(loss_of) if compiled else loss_of
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, V, (b, l + 1), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = fn(tokens)
        loss.backward()
        opt.step()

    for _ in range(2):  # warm-up (and compilation)
        step()
    return b * l / best_seconds(step, reps)


def torch_decode(batch, prompt, steps, threads):
    import torch
    torch.set_num_threads(threads)
    model = make_model(128, 2, 512)
    g = torch.Generator().manual_seed(0)
    maxlen = prompt + steps
    kc = [torch.zeros(batch, 2, maxlen, 32) for _ in range(2)]
    vc = [torch.zeros(batch, 2, maxlen, 32) for _ in range(2)]
    with torch.inference_mode():
        tokens = torch.randint(0, V, (batch, prompt), generator=g)
        logits = model(tokens, kc, vc, 0)[:, -1]
        t0 = time.perf_counter()
        for step in range(steps):
            nxt = torch.multinomial(torch.softmax(logits, -1), 1)
            logits = model(nxt, kc, vc, prompt + step)[:, -1]
        return batch * steps / (time.perf_counter() - t0)


def hf_generate(batch, prompt, steps, threads):
    import torch
    import transformers
    torch.set_num_threads(threads)
    cfg = transformers.Qwen3Config(
        vocab_size=V, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
        tie_word_embeddings=True, rope_theta=THETA, rms_norm_eps=EPS)
    model = transformers.Qwen3ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (batch, prompt), generator=g)
    kw = dict(do_sample=True, max_new_tokens=steps, min_new_tokens=steps, top_k=0, top_p=1.0,
              pad_token_id=0)
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=True, pad_token_id=0)
        t0 = time.perf_counter()
        model.generate(ids, **kw)
        return batch * steps / (time.perf_counter() - t0)


def ours(bench, threads, quick):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    args = ["cargo", "bench", "-q", "-p", "reference-trainer", "--bench", bench, "--", "--json"]
    if quick:
        args.append("--quick")
    out = subprocess.run(args, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def real_folder():
    """SmolLM2-135M-Instruct as an f32 Hugging Face folder, converted once from the cached GGUF."""
    gguf = os.path.join(SMOLLM2, "SmolLM2-135M-Instruct.Q4_1.gguf")
    folder = os.path.join(SMOLLM2, "hf-f32")
    if not os.path.exists(gguf):
        subprocess.check_call(["bash", os.path.join(ROOT, "scripts", "fetch_smollm2.sh")])
    if not os.path.exists(os.path.join(folder, "config.json")):
        subprocess.check_call(["cargo", "run", "-q", "--release", "-p", "reference-trainer", "--",
                               "convert", gguf, folder], cwd=ROOT)
    return folder


def torch_real(folder, threads, reps, steps):
    """PyTorch eager on the folder's weights: decode tok/s at batch 1/32/64 and a training step."""
    import torch
    import transformers
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    vocab = model.config.vocab_size
    out = {}
    g = torch.Generator().manual_seed(0)
    model.eval()
    for batch in (1, 32, 64):
        best = float("inf")
        for _ in range(reps):
            ids = torch.randint(0, vocab, (batch, 64), generator=g)
            with torch.inference_mode():
                o = model(ids, use_cache=True)
                cache, logits = o.past_key_values, o.logits[:, -1]
                t0 = time.perf_counter()
                for _ in range(steps):
                    nxt = torch.multinomial(torch.softmax(logits, -1), 1)
                    o = model(nxt, past_key_values=cache, use_cache=True)
                    cache, logits = o.past_key_values, o.logits[:, -1]
                best = min(best, time.perf_counter() - t0)
        out[f"decode batch {batch}"] = batch * steps / best
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
    tokens = torch.randint(0, vocab, (8, 257), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1], use_cache=False).logits
        logp = torch.log_softmax(logits, -1)
        (-logp.gather(-1, tokens[:, 1:, None]).mean()).backward()
        opt.step()

    step()
    out["train 8x256"] = 8 * 256 / best_seconds(step, reps)
    return out


def main_real(args):
    import torch
    folder = real_folder()
    reps, steps = (1, 8) if args.quick else (2, 32)
    best = {}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
        cmd = ["cargo", "bench", "-q", "-p", "reference-trainer", "--bench", "real_model", "--",
               "--model", folder, "--json"] + (["--quick"] if args.quick else [])
        o = json.loads(subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True,
                                      text=True).stdout.strip().splitlines()[-1])
        t = torch_real(folder, args.threads, reps, steps)
        for k in ("decode batch 1", "decode batch 32", "decode batch 64", "train 8x256"):
            ours = o[f"{k} (control on)"] if k.startswith("decode") else o[k]
            best[(k, "ours")] = max(best.get((k, "ours"), 0.0), ours)
            best[(k, "eager")] = max(best.get((k, "eager"), 0.0), t[k])
        for b in (1, 32, 64):
            key = f"control kernel share, batch {b} (%)"
            best[(key, "ours")] = min(best.get((key, "ours"), 100.0), o[key])
    print(f"SmolLM2-135M-Instruct (f32, from the Q4_1 GGUF), torch {torch.__version__}, "
          f"{args.threads} threads, best of {args.rounds} rounds (tok/s)")
    print()
    print("| measure | ours | PyTorch eager | ours / eager |")
    print("|---|---:|---:|---:|")
    for k in ("decode batch 1", "decode batch 32", "decode batch 64", "train 8x256"):
        o, e = best[(k, "ours")], best[(k, "eager")]
        print(f"| {k} | {o:.1f} | {e:.1f} | {o / e:.2f}x |")
    print()
    print("control kernel share of our decode step (lowest of the rounds): " + ", ".join(
        f"batch {b} {best[(f'control kernel share, batch {b} (%)', 'ours')]:.1f} %"
        for b in (1, 32, 64)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions per round")
    ap.add_argument("--real", action="store_true",
                    help="SmolLM2-135M-Instruct instead of the tiny shapes (decode and training)")
    args = ap.parse_args()
    ensure_torch()
    if args.real:
        return main_real(args)
    import torch
    reps = 2 if args.quick else 4
    best = {}

    def keep(key, value):
        best[key] = max(best.get(key, 0.0), value)

    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        o = ours("train_step", args.threads, args.quick)
        for shape in SHAPES:
            name = f"train {shape[0]} {shape[4]}x{shape[5]}"
            keep((name, "ours"), o[f"{name} fused"])
            keep((name, "composed"), o[f"{name} composed"])
            keep((name, "eager"), torch_train(shape, args.threads, False, reps))
            keep((name, "compile"), torch_train(shape, args.threads, True, reps))
        o = ours("rollout", args.threads, args.quick)
        for b in (1, 32, 64):
            name = f"decode batch {b}"
            keep((name, "ours"), o[f"decode batch {b} (control on)"])
            keep((name, "candle"), o[f"decode batch {b}, candle path (control on)"])
            keep((name, "eager"), torch_decode(b, 64, 64, args.threads))
        keep(("decode batch 64", "hf"), hf_generate(64, 64, 64, args.threads))

    print(f"torch {torch.__version__}, {args.threads} threads, best of {args.rounds} rounds (tok/s)")
    print()
    print("| training step | ours (fused) | ours (composed) | PyTorch eager | torch.compile "
          "| fused / eager | fused / compile |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for shape in SHAPES:
        name = f"train {shape[0]} {shape[4]}x{shape[5]}"
        o, c, e, k = (best[(name, x)] for x in ("ours", "composed", "eager", "compile"))
        print(f"| {name[6:]} | {o:.0f} | {c:.0f} | {e:.0f} | {k:.0f} | {o / e:.2f}x | {o / k:.2f}x |")
    print()
    print("| decode (control on) | ours, direct step | ours, candle tensors (previous) "
          "| PyTorch eager | direct / eager | direct / candle |")
    print("|---|---:|---:|---:|---:|---:|")
    for b in (1, 32, 64):
        name = f"decode batch {b}"
        o, c, e = best[(name, "ours")], best[(name, "candle")], best[(name, "eager")]
        print(f"| batch {b} | {o:.0f} | {c:.0f} | {e:.0f} | {o / e:.2f}x | {o / c:.2f}x |")
    o, h = best[("decode batch 64", "ours")], best[("decode batch 64", "hf")]
    print(f"\nHF generate, batch 64: {h:.0f} tok/s; ours / HF generate = {o / h:.2f}x")


if __name__ == "__main__":
    main()
