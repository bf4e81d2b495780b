"""What a user relies on across the trainer and transformers (the versions of
`python/ci/requirements-hf.txt`), on a trainer checkpoint (the embedded default model and
tokenizer, written by the writers the trainer's checkpoints use):

1. transformers loads it: `AutoTokenizer` gives our token ids on 600+ varied strings (NFC and
   decomposed text, chat markup, code, random Unicode), as does `tokenizers.Tokenizer.from_file`
   on its `tokenizer.json`; `AutoModelForCausalLM` gives our logits at every position of varied
   sequences (max abs diff <= 1e-4, argmax equal); `generate` stops at `<|im_end|>`;
2. transformers' `save_pretrained` of what it loaded (transformers 5 writes `rope_parameters`,
   `dtype`, ...) loads back in the trainer with the same logits and token ids.

Our side runs through `reference-trainer/examples/parity.rs`. From the repository root:

    cargo build -p reference-trainer --example parity
    VENV/bin/python tests/interop.py [--example target/debug/examples/parity]

Prints the numbers and exits non-zero on any difference.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python" / "tests"))
from gguf_parity import texts  # noqa: E402  (the same varied strings as the GGUF check)


def run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True)


def our_ids(example: Path, model: Path, strings: list[str], tmp: Path) -> list[list[int]]:
    (tmp / "texts.json").write_text(json.dumps(strings))
    run([str(example), "encode", str(model), str(tmp / "texts.json"), str(tmp / "ids.json")])
    return json.loads((tmp / "ids.json").read_text())


def our_logits(example: Path, model: Path, seqs: list[list[int]], vocab: int, tmp: Path) -> list[np.ndarray]:
    (tmp / "seqs.json").write_text(json.dumps(seqs))
    run([str(example), "logits", str(model), str(tmp / "seqs.json"), str(tmp / "logits.bin")])
    flat = np.fromfile(tmp / "logits.bin", dtype="<f4")
    out, offset = [], 0
    for s in seqs:
        n = len(s) * vocab
        out.append(flat[offset : offset + n].reshape(len(s), vocab).astype(np.float64))
        offset += n
    assert offset == flat.size, f"{flat.size} logits for {offset} expected"
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--example", type=Path, default=ROOT / "target/debug/examples/parity")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--tolerance", type=float, default=1e-4)
    args = p.parse_args()

    import tokenizers
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    failed = False

    def report(ok: bool, line: str) -> None:
        nonlocal failed
        failed |= not ok
        print(("ok    " if ok else "FAIL  ") + line)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ck = tmp / "checkpoint"
        run([str(args.example), "default", str(args.seed), str(ck)])

        # 1. transformers loads the trainer's checkpoint.
        strings = texts()
        ours = our_ids(args.example, ck, strings, tmp)
        hf_tok = AutoTokenizer.from_pretrained(str(ck))
        theirs = [hf_tok(s, add_special_tokens=False)["input_ids"] for s in strings]
        differ = [(s, a, b) for s, a, b in zip(strings, ours, theirs) if a != b]
        report(not differ, f"AutoTokenizer ({type(hf_tok).__name__}, transformers {transformers.__version__}): "
               f"{len(strings)} strings, {len(differ)} differ")
        for s, a, b in differ[:5]:
            print(f"      {s!r}: ours {a}, transformers {b}")
        raw = tokenizers.Tokenizer.from_file(str(ck / "tokenizer.json"))
        raw_differ = sum(raw.encode(s, add_special_tokens=False).ids != a for s, a in zip(strings, ours))
        report(raw_differ == 0, f"tokenizers {tokenizers.__version__} Tokenizer.from_file: {raw_differ} differ")

        model = AutoModelForCausalLM.from_pretrained(str(ck), dtype=torch.float32)
        model.eval()
        vocab = model.config.vocab_size
        prompts = [
            "<|im_start|>user\nFind a red mug under 20 dollars.<|im_end|>\n<|im_start|>assistant\n<think>\n",
            "Question: who wrote the novel? <think>I should search.</think>\n<action>search[novel]</action>",
            " ".join(strings[30:60]),
            strings[400] + strings[401],
        ]
        seqs = [hf_tok(s, add_special_tokens=False)["input_ids"] for s in prompts]
        seqs = [s for s in seqs if s]

        def compare(what: str, ours_l: list[np.ndarray], hf_model) -> None:
            worst, argmax = 0.0, True
            for ids, mine in zip(seqs, ours_l):
                with torch.no_grad():
                    theirs_l = hf_model(torch.tensor([ids])).logits[0].double().numpy()
                worst = max(worst, float(np.abs(mine - theirs_l).max()))
                argmax &= bool((mine.argmax(-1) == theirs_l.argmax(-1)).all())
            lengths = ", ".join(str(len(s)) for s in seqs)
            report(worst <= args.tolerance and argmax,
                   f"{what}: logits of {len(seqs)} sequences ({lengths} tokens), max abs diff {worst:.2e}, "
                   f"argmax equal {argmax}")

        compare("AutoModelForCausalLM on the trainer's checkpoint", our_logits(args.example, ck, seqs, vocab, tmp), model)

        im_end = hf_tok.convert_tokens_to_ids("<|im_end|>")
        eos = model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, list) else [eos])
        report(im_end in eos, f"generation_config.eos_token_id {sorted(eos)} holds <|im_end|> ({im_end})")

        # 2. transformers' re-save loads back in the trainer.
        resaved = tmp / "resaved"
        model.save_pretrained(str(resaved))
        hf_tok.save_pretrained(str(resaved))
        cfg = json.loads((resaved / "config.json").read_text())
        print(f"      re-saved config.json keys: {', '.join(sorted(k for k in cfg if 'rope' in k or 'dtype' in k))}")
        compare("the trainer on transformers' save_pretrained", our_logits(args.example, resaved, seqs, vocab, tmp), model)
        again = our_ids(args.example, resaved, strings, tmp)
        back = sum(a != b for a, b in zip(again, theirs))
        report(back == 0, f"the trainer's tokenizer from transformers' save_pretrained: {back} of {len(strings)} differ "
               "from AutoTokenizer")

    print("INTEROP FAILED" if failed else "interop ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
