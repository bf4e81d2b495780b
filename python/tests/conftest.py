"""Shared fixtures: the tiny Qwen3 (built once per session) and the Rust replay of recorded
decode steps (t2po-control/examples/replay.rs, the kernel's Rust API)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)


def require(module: str):
    """Imports an engine; when CI installed it (T2PO_REQUIRE_<MODULE>=1) its absence fails."""
    if os.environ.get(f"T2PO_REQUIRE_{module.upper()}") == "1":
        return __import__(module)
    return pytest.importorskip(module, reason=f"needs {module}: run .ci/python.sh")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    require("transformers")
    import tiny_qwen3

    path = str(tmp_path_factory.mktemp("tiny-qwen3"))
    ids = tiny_qwen3.build(path)
    return path, ids


def replay_binary() -> str:
    env = os.environ.get("T2PO_REPLAY")
    if env:
        return env
    subprocess.run(
        ["cargo", "build", "-q", "--locked", "-p", "t2po-control", "--example", "replay"],
        cwd=REPO,
        check=True,
    )
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    return os.path.join(target, "debug", "examples", "replay")


def rust_replay(config, generations):
    """`generations`: list of (prompt ids, [(emitted token, raw f32 logits row)...]). Returns per
    generation ([(position, event, forced_token) per step], Φ or None), from the Rust kernel."""
    lines = []
    for name, value in config.to_dict().items():
        raw = getattr(config._c, name)
        if name == "queue":
            lines.append("set queue " + " ".join(str(t) for t in value))
        else:
            lines.append(f"set {name} {float(raw)!r}" if isinstance(raw, float) else f"set {name} {int(raw)}")
    for prompt, steps in generations:
        lines.append("seq")
        lines.append("prompt " + " ".join(str(int(t)) for t in prompt))
        for token, row in steps:
            bits = np.ascontiguousarray(row, dtype=np.float32).view(np.uint32)
            lines.append(f"step {int(token)} " + " ".join(f"{b:08x}" for b in bits))
        lines.append("end")
    done = subprocess.run(
        [replay_binary()], input="\n".join(lines) + "\n", capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    out, cur = [], []
    for line in done.stdout.splitlines():
        words = line.split()
        if words[0] == "step":
            cur.append(tuple(int(w) for w in words[1:]))
        else:
            out.append((cur, None if words[1] == "none" else float(words[1])))
            cur = []
    return out
