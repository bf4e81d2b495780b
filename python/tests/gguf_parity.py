"""Parity of the trainer's GGUF loading with transformers' on a real file.

Compares, for one GGUF file (default: the SmolLM2 fixture of `scripts/fetch_smollm2.sh`):

- token ids: the trainer's tokenizer (built from `tokenizer.ggml.*`) against
  `AutoTokenizer.from_pretrained(dir, gguf_file=...)` on 600+ varied strings (plain and chat text,
  code, numbers, whitespace runs, special tokens, and seeded random Unicode): 0 may differ;
- weights: the trainer's dequantised, un-permuted tensors (`reference-trainer convert`) against
  transformers' state dict: bit for bit;
- logits: the trainer's forward on the dequantised weights against
  `AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32)` on the same ids,
  every position: max abs diff <= 1e-4 (`--tolerance`), or, where both f32 forwards are further
  apart than that, ours within 4x of transformers' own f32 error, both measured against
  transformers' forward in float64 (SmolLM2's first position carries activations large enough
  that f32 summation order alone moves its logits by ~1e-4).

Our side runs through `reference-trainer/examples/parity.rs`. Run from the repository root
with a venv holding torch and transformers (the versions of `python/ci/requirements-hf.txt`) and
the `gguf` package:

    bash scripts/fetch_smollm2.sh
    cargo build -p reference-trainer --bin reference-trainer --example parity
    VENV/bin/python python/tests/gguf_parity.py [--gguf FILE] [--example EXAMPLE] [--cli BINARY]

Prints the numbers and exits non-zero on any difference past the tolerance.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def texts(seed: int = 2026) -> list[str]:
    fixed = [
        "The capital of France is",
        "Hello world",
        " Hello world",
        "  two  spaces\tand a tab\r\nand CRLF\n\n\nthree newlines",
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "<think>I should search.</think>\n<action>search[red mug]</action>",
        "def f(x):\n    return x ** 2  # square\n",
        "1234567890 3.14159 1e-5 -42 1,000,000",
        "it's we're they'll I'd you've she'd",
        "Résumé, naïve café — déjà vu",
        "北京欢迎你 日本語のテキスト 한국어",
        "emoji 🙂👍🏽👨‍👩‍👧‍👦 flags 🇩🇪",
        "RTL مرحبا بالعالم עברית",
        "combining e\u0301 vs \u00e9",
        "\u200bzero width\u2028\u2029\ufeff",
        "",
        " ",
        "\n",
        "<|endoftext|><|endoftext|>",
        "<|im_end|>trailing",
        "URL https://example.org/a/b?c=d&e=f#g",
        "ALL CAPS SHOUTING AND MiXeD cAsE",
        "tabs\t\t\tand    spaces    ",
    ]
    rng = random.Random(seed)
    words = (
        "the of and to in is that for it as was with be by on not he this are or his from at "
        "which but have an they you were her she there been one all we their has would when if "
        "so no will more can out up about into than them some could him time only new its may "
        "Paris France capital river mug search click buy action think answer question 2026 42"
    ).split()
    ranges = [
        (0x20, 0x7E),
        (0xA0, 0x24F),
        (0x370, 0x3FF),
        (0x400, 0x4FF),
        (0x590, 0x6FF),
        (0x900, 0x97F),
        (0x3040, 0x30FF),
        (0x4E00, 0x9FFF),
        (0xAC00, 0xD7A3),
        (0x1F300, 0x1FAFF),
        (0x09, 0x0D),
    ]
    out = list(fixed)
    for _ in range(300):  # word salad with punctuation, numbers and whitespace
        n = rng.randrange(1, 30)
        parts = []
        for _ in range(n):
            r = rng.random()
            if r < 0.7:
                w = rng.choice(words)
                parts.append(w.capitalize() if rng.random() < 0.2 else w)
            elif r < 0.85:
                parts.append(str(rng.randrange(0, 10 ** rng.randrange(1, 8))))
            else:
                parts.append(rng.choice([".", ",", "!", "?", ":", ";", "(", ")", "'s", "\"", "-", "—", "...", "\n", "\t", "  "]))
        out.append(rng.choice(["", " ", "\n"]).join(parts) if rng.random() < 0.2 else " ".join(parts))
    for _ in range(300):  # random Unicode
        n = rng.randrange(0, 24)
        s = "".join(chr(rng.randint(*rng.choice(ranges))) for _ in range(n))
        out.append(s)
    return out


def run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True)


def main() -> int:
    root = Path(__file__).resolve().parents[2]
    default_gguf = Path(os.environ.get("HOME", "~")) / ".cache/t2po-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    p = argparse.ArgumentParser()
    p.add_argument("--gguf", type=Path, default=default_gguf)
    p.add_argument("--example", type=Path, default=root / "target/debug/examples/parity")
    p.add_argument("--cli", type=Path, default=root / "target/debug/reference-trainer")
    p.add_argument("--tolerance", type=float, default=1e-4)
    args = p.parse_args()
    if not args.gguf.is_file():
        print(f"{args.gguf} is missing: run scripts/fetch_smollm2.sh", file=sys.stderr)
        return 2

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gdir, gname = str(args.gguf.parent), args.gguf.name
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # Token ids.
        strings = texts()
        (tmp / "texts.json").write_text(json.dumps(strings))
        run([str(args.example), "encode", str(args.gguf), str(tmp / "texts.json"), str(tmp / "ids.json")])
        ours = json.loads((tmp / "ids.json").read_text())
        hf_tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
        theirs = [hf_tok(s, add_special_tokens=False)["input_ids"] for s in strings]
        differ = [(s, a, b) for s, a, b in zip(strings, ours, theirs) if a != b]
        print(f"tokenizer: {len(strings)} strings, {len(differ)} differ ({type(hf_tok).__name__})")
        for s, a, b in differ[:10]:
            print(f"  {s!r}: ours {a} transformers {b}")
        failed |= bool(differ)

        # Logits, every position, on ids transformers' tokenizer gives.
        prompts = [
            "The capital of France is",
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
            "def fibonacci(n):\n    if n < 2:\n        return n\n",
            "Résumé: 北京 🙂 1234567",
        ]
        seqs = [hf_tok(s, add_special_tokens=False)["input_ids"] for s in prompts]
        (tmp / "seqs.json").write_text(json.dumps(seqs))
        run([str(args.example), "logits", str(args.gguf), str(tmp / "seqs.json"), str(tmp / "logits.bin")])
        flat = np.fromfile(tmp / "logits.bin", dtype="<f4")
        model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32)
        model.eval()

        # Weights: ours as `convert` writes them.
        from safetensors.torch import load_file

        hf_dir = tmp / "hf"
        run([str(args.cli), "convert", str(args.gguf), str(hf_dir)])
        ours_w = load_file(str(hf_dir / "model.safetensors"))
        state = model.state_dict()
        w_diff = max(float((ours_w[k] - state[k]).abs().max()) for k in ours_w)
        print(f"weights: {len(ours_w)} tensors (lm_head tied), max abs diff {w_diff:g}")
        failed |= w_diff != 0.0

        vocab = model.config.vocab_size
        model64 = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32).to(torch.float64)
        model64.eval()
        offset, worst, worst64, floor64 = 0, 0.0, 0.0, 0.0
        for s, ids in zip(prompts, seqs):
            n = len(ids) * vocab
            ours_l = flat[offset : offset + n].reshape(len(ids), vocab).astype(np.float64)
            offset += n
            with torch.no_grad():
                theirs_l = model(torch.tensor([ids])).logits[0].double().numpy()
                exact = model64(torch.tensor([ids])).logits[0].numpy()
            d = float(np.abs(ours_l - theirs_l).max())
            d64 = float(np.abs(ours_l - exact).max())
            f64 = float(np.abs(theirs_l - exact).max())
            worst, worst64, floor64 = max(worst, d), max(worst64, d64), max(floor64, f64)
            same_argmax = bool((ours_l.argmax(-1) == theirs_l.argmax(-1)).all())
            print(
                f"logits: {len(ids)} tokens, ours vs transformers {d:.3e} (vs float64: ours {d64:.3e}, "
                f"transformers {f64:.3e}), max |logit| {np.abs(exact).max():.1f}, argmax equal {same_argmax}: {s[:40]!r}"
            )
            failed |= not same_argmax
        print(
            f"logits: worst ours vs transformers {worst:.3e} (tolerance {args.tolerance:g}); against float64: "
            f"ours {worst64:.3e}, transformers' f32 {floor64:.3e}"
        )
        failed |= worst > args.tolerance and worst64 > 4 * floor64
    print("PARITY FAILED" if failed else "parity ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
