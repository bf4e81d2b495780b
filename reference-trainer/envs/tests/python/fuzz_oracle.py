"""The Python side of tests/webshop_python_parity.rs (run by it; not a test of its own).

argv: CASES OUT_DIR [OPTION_CASES]. CASES holds one JSON object per line, {"a": A, "b": B}, where A and B are a
string or a [name, value] pair (passed to thefuzz as a Python tuple, as WebShop's dict goal
options are). Writes to OUT_DIR:

* results.jsonl: per case {"ratio": thefuzz.fuzz.token_set_ratio(A, B), "raw": rapidfuzz's float
  score on the processed strings, "str_a": str(A), "str_b": str(B), "lower_a": str(A).lower()};
* lower.u32: for every code point, chr(c).lower() as two little-endian u32 (the second 0 when
  it is one code point; surrogates: 0xFFFFFFFF twice);
* process.u32: for every code point (surrogates: 0xFFFFFFFF), the code point rapidfuzz's
  default_process maps it to (little-endian u32);
* printable.bits: str.isprintable() of every code point, one bit each (LSB first);
* meta.json: versions;
* options.jsonl, with OPTION_CASES (first line {"colors": COLOR_SET}, then per line {"purchased":
  [str], "goal": [str] or [[name, value]], "dict": bool}): per case {"matches": n}, the
  num_option_matches of WebShop's get_option_reward as goal.py computes it (a dict goal's
  options are passed as .items() tuples).
"""
import json
import os
import struct
import sys
import unicodedata

import rapidfuzz
from rapidfuzz import fuzz as rfuzz
from rapidfuzz.utils import default_process
import thefuzz
from thefuzz import fuzz, utils

cases_path, out = sys.argv[1], sys.argv[2]


def value(x):
    return tuple(x) if isinstance(x, list) else x


with open(cases_path, encoding="utf-8") as fh, open(
    os.path.join(out, "results.jsonl"), "w", encoding="utf-8"
) as res:
    for line in fh:
        case = json.loads(line)
        a, b = value(case["a"]), value(case["b"])
        raw = rfuzz.token_set_ratio(
            utils.full_process(a, force_ascii=True), utils.full_process(b, force_ascii=True)
        )
        res.write(
            json.dumps(
                {
                    "ratio": fuzz.token_set_ratio(a, b),
                    "raw": raw,
                    "str_a": str(a),
                    "str_b": str(b),
                    "lower_a": str(a).lower(),
                }
            )
            + "\n"
        )

if len(sys.argv) > 3:
    # goal.py's normalize_color and get_option_reward, as written there.
    with open(sys.argv[3], encoding="utf-8") as fh, open(
        os.path.join(out, "options.jsonl"), "w", encoding="utf-8"
    ) as res:
        colors = json.loads(fh.readline())["colors"]

        def normalize_color(color_string):
            for norm_color in colors:
                if norm_color in color_string:
                    return norm_color
            return color_string

        for line in fh:
            case = json.loads(line)
            goal = case["goal"]
            goal_options = [tuple(g) for g in goal] if case["dict"] else goal
            purchased = [normalize_color(o) for o in case["purchased"]]
            goal_options = [normalize_color(o) for o in goal_options]
            n = 0
            for g_option in goal_options:
                for p_option in purchased:
                    if fuzz.token_set_ratio(p_option, g_option) > 85:
                        n += 1
                        break
            res.write(json.dumps({"matches": n}) + "\n")

proc = bytearray()
lower = bytearray()
bits = bytearray((0x110000 + 7) // 8)
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        proc += struct.pack("<I", 0xFFFFFFFF)
        lower += struct.pack("<II", 0xFFFFFFFF, 0xFFFFFFFF)
        continue
    ch = chr(cp)
    low = ch.lower()
    lower += struct.pack("<II", ord(low[0]), ord(low[1]) if len(low) > 1 else 0)
    # Between two letters so the trim cannot remove a space.
    mapped = default_process("a" + ch + "a")[1:-1]
    assert len(mapped) == 1, (cp, mapped)
    proc += struct.pack("<I", ord(mapped))
    if ch.isprintable():
        bits[cp // 8] |= 1 << (cp % 8)
with open(os.path.join(out, "process.u32"), "wb") as fh:
    fh.write(proc)
with open(os.path.join(out, "lower.u32"), "wb") as fh:
    fh.write(lower)
with open(os.path.join(out, "printable.bits"), "wb") as fh:
    fh.write(bits)
with open(os.path.join(out, "meta.json"), "w") as fh:
    json.dump(
        {
            "python": sys.version.split()[0],
            "unicode": unicodedata.unidata_version,
            "rapidfuzz": rapidfuzz.__version__,
            "thefuzz": getattr(thefuzz, "__version__", "?"),
        },
        fh,
    )
