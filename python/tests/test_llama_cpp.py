"""adapters/llama.cpp: the T²PO sampler first in a real llama.cpp sampler chain, on the tiny
random Qwen3 converted to GGUF by llama.cpp's own script: at every generated token the
sampler's decision (event, forced token) equals the Rust kernel's on the raw logits llama.cpp
produced, the forced queue comes out in order, and a clone carries the state. Needs a built
llama.cpp (.ci/python.sh llama): T2PO_LLAMA_DIR (source tree) and T2PO_LLAMA_DECODE (the
driver built by adapters/llama.cpp/Makefile). T2PO_LLAMA_WRAP, if set, is a command the driver
runs under (CI: valgrind); CI also runs these tests on a driver built with ASan + UBSan."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from conftest import HERE, replay_binary

NEEDED = ("T2PO_LLAMA_DIR", "T2PO_LLAMA_DECODE")
if os.environ.get("T2PO_REQUIRE_LLAMA") != "1" and not all(os.environ.get(v) for v in NEEDED):
    pytest.skip("needs a built llama.cpp: run .ci/python.sh llama", allow_module_level=True)


@pytest.fixture(scope="module")
def gguf(tiny_model, tmp_path_factory):
    path, ids = tiny_model
    out = str(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "convert_gguf.py"), os.environ["T2PO_LLAMA_DIR"], path, out],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, ids


def parse_replay(text):
    steps = [tuple(int(w) for w in line.split()[1:]) for line in text.splitlines() if line.startswith("step")]
    return steps


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_sampler_decisions_equal_the_rust_kernel(gguf, tmp_path, seed):
    model, ids = gguf
    queue = [ids["</think>"], ids["\n"], ids["<action>"]]
    prompt = [ids["<|im_start|>"], 40 + seed, 80 + seed, ids["\n"], ids["<think>"], ids["\n"]]
    rep = tmp_path / "replay.txt"
    run = subprocess.run(
        [*shlex.split(os.environ.get("T2PO_LLAMA_WRAP", "")), os.environ["T2PO_LLAMA_DECODE"], model, str(rep), str(seed), "80", str(ids["<action>"]),
         str(ids["<think>"]), str(ids["</think>"]), "6", "40", ",".join(map(str, queue)),
         ",".join(map(str, prompt))],
        capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    gen = [tuple(int(w) for w in line.split()[1:]) for line in run.stdout.splitlines() if line.startswith("gen ")]
    info = next(line for line in run.stdout.splitlines() if line.startswith("info "))
    with open(rep) as f:
        rust = subprocess.run([replay_binary()], stdin=f, capture_output=True, text=True)
    assert rust.returncode == 0, rust.stderr
    steps = parse_replay(rust.stdout)
    assert len(steps) == len(gen)
    fired = None
    for (k, tok, event, forced), (_, r_event, r_forced) in zip(gen, steps):
        assert (event, forced) == (r_event, r_forced), f"step {k}"
        if forced >= 0:
            assert tok == forced
        if event:
            fired = k
    if fired is not None:  # the queue follows the firing step, in order, and ends the run
        assert [g[1] for g in gen[fired + 1 : fired + 4]] == queue and len(gen) == fired + 4
    else:  # the model ended the turn itself (sampled <action>) before TTI fired
        assert gen[-1][1] == ids["<action>"] and all(g[3] == -1 for g in gen)
    # The clone matched the state; after reset it is back at the prompt, armed again.
    assert info.endswith("clone_after_reset_generated 0 armed 1"), info
    print(f"llama.cpp seed {seed}: {len(gen)} tokens, TTI fired at {fired}, agreed with the Rust kernel")
