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

PyTorch and transformers come from PyPI: on first use the script creates a venv under
~/.cache/t2po-bench-venv and installs them there (a few GB, several minutes), then re-runs itself
inside it. It is not part of CI.
"""
import argparse
import json
import os
import subprocess
import sys
import time

VENV = os.path.expanduser("~/.cache/t2po-bench-venv")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = [("1M", 128, 2, 512, 16, 256), ("1M", 128, 2, 512, 8, 1024), ("5M", 256, 4, 1024, 16, 256)]
V, EPS, THETA = 4096, 1e-6, 1e6


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
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t)
    return b * l / best


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions per round")
    args = ap.parse_args()
    ensure_torch()
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
