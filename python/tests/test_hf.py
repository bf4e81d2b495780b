"""t2po.hf inside real transformers `generate` on the tiny random Qwen3: TTI fires at exactly
the step the Rust kernel computes on the same raw logits, the forced queue comes out in order,
rows that finish early keep their own state, a processor with TTI off changes nothing, and TDS
over multi-turn episodes follows the spec's rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import require, rust_replay

torch = require("torch")
transformers = require("transformers")

import t2po  # noqa: E402
from t2po.hf import T2poLogitsProcessor, TdsTurns  # noqa: E402

PROMPTS = [
    "buy a red shirt",
    "put a clean mug in the coffee machine, then go to the table",
    "who wrote the novel?",
    "search for cotton shirts under 30 dollars and click buy",
]


def load(tiny_model):
    path, ids = tiny_model
    tok = transformers.AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return tok, model, ids


def config_for(ids, **kw):
    base = dict(
        think_open=ids["<think>"],
        think_close=ids["</think>"],
        queue=[ids["</think>"], ids["\n"], ids["<action>"]],
        min_len=6,
        max_think=40,
    )
    base.update(kw)
    return t2po.Config.paper(**base)


def encode(tok, prompts):
    texts = [
        tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in prompts
    ]
    return tok(texts, return_tensors="pt", padding=True)


@pytest.mark.parametrize("profile", ["paper", "released"])
def test_tti_in_generate_matches_the_rust_kernel(tiny_model, profile):
    tok, model, ids = load(tiny_model)
    if profile == "paper":
        cfg = config_for(ids)
    else:  # the released rules: patience counter, one-token queue
        cfg = t2po.Config.released(
            think_open=ids["<think>"], think_close=ids["</think>"], queue=[ids["</think>"]],
            max_think=30, patience=3, patience_tol=0.01, phi_skip=4,
        )
    # A row ends with <action> (the queue's last token) or </think> (the released queue), so
    # rows that fire at different steps finish at different steps while the others go on.
    eos = [ids["<|im_end|>"], cfg.queue[-1]]
    proc = T2poLogitsProcessor(cfg, eos_token_id=eos)
    enc = encode(tok, PROMPTS)
    torch.manual_seed(3)
    out = model.generate(
        **enc, logits_processor=[proc], do_sample=True, temperature=0.7, top_k=0, top_p=1.0,
        max_new_tokens=60, eos_token_id=eos, output_logits=True, return_dict_in_generate=True,
    )
    proc.finish(out.sequences)
    width = enc.input_ids.shape[1]
    new = out.sequences[:, width:]
    generations = []
    for b in range(len(PROMPTS)):
        end = proc.records[b].finished_at
        n = end + 1 if end is not None else new.shape[1]
        steps = [(int(new[b, k]), out.logits[k][b].numpy()) for k in range(n)]
        generations.append((enc.input_ids[b].numpy(), steps))
    replays = rust_replay(cfg, generations)

    fired = proc.fired_steps()
    agree = 0
    finish_steps = set()
    for b, (steps, phi) in enumerate(replays):
        if phi is None:  # a turn shorter than the released rule's phi_skip: no Φ on either side
            with pytest.raises(t2po.T2poError) as err:
                proc.batch[b].turn_signal()
            assert err.value.status == t2po.Status.EMPTY_TURN
        else:
            assert math.isclose(proc.batch[b].turn_signal(), phi, rel_tol=1e-6)
        rust_events = [(k, t2po.Event(e)) for k, (_, e, _) in enumerate(steps) if e != 0]
        rust_forced = [(k, f) for k, (_, _, f) in enumerate(steps) if f >= 0]
        rec = proc.records[b]
        assert rec.events == rust_events, f"row {b}"
        assert rec.forced == rust_forced, f"row {b}"
        k = fired[b]
        if k is None:
            # The model ended the row itself before TTI fired (a sampled end token).
            assert rec.finished_at is not None and new[b, rec.finished_at].item() in eos, f"row {b}"
            assert not rec.forced
            finish_steps.add(rec.finished_at)
            agree += 1
            continue
        # The queue follows the firing step, in order, in the generated tokens.
        queue = cfg.queue
        assert new[b, k + 1 : k + 1 + len(queue)].tolist() == queue, f"row {b}"
        assert rec.finished_at == k + len(queue), f"row {b} ends with the queue"
        finish_steps.add(rec.finished_at)
        # The row's state stayed where it finished while the other rows went on.
        info = proc.batch[b].info()
        assert info.generated == rec.finished_at + 1 and info.fired_position == steps[k][0]
        # After a row's end, generate pads it: nothing of ours touched it.
        assert (new[b, rec.finished_at + 1 :] == model.generation_config.pad_token_id).all()
        agree += 1
    print(f"hf {profile}: TTI agreed with the Rust kernel on {agree}/{len(PROMPTS)} rows, fired at {fired}")
    assert sum(f is not None for f in fired) >= 3, f"TTI fired on too few rows to test: {fired}"
    assert len(finish_steps) >= 2, "rows finished at the same step: the test did not exercise early finishing"


def test_tti_off_changes_nothing(tiny_model):
    tok, model, ids = load(tiny_model)
    enc = encode(tok, PROMPTS[:2])
    kw = dict(do_sample=True, max_new_tokens=30, temperature=0.9)
    torch.manual_seed(5)
    plain = model.generate(**enc, **kw)
    torch.manual_seed(5)
    proc = T2poLogitsProcessor(config_for(ids, tti_enabled=0), eos_token_id=ids["<|im_end|>"])
    with_proc = model.generate(**enc, logits_processor=[proc], **kw)
    proc.finish(with_proc)
    assert torch.equal(plain, with_proc)
    assert proc.fired_steps() == [None, None] and all(i.position > 0 for i in proc.batch.infos())


def test_one_processor_serves_successive_generate_calls(tiny_model):
    tok, model, ids = load(tiny_model)
    proc = T2poLogitsProcessor(config_for(ids, min_len=0, max_think=3, epsilon=0.0), eos_token_id=ids["<action>"])
    for prompts in (PROMPTS[:1], PROMPTS[1:4]):
        enc = encode(tok, prompts)
        out = model.generate(**enc, logits_processor=[proc], do_sample=False, max_new_tokens=20)
        proc.finish(out)
        new = out[:, enc.input_ids.shape[1] :]
        assert proc.batch.size == len(prompts)
        for b in range(len(prompts)):
            # L_max = 3 content tokens, then </think> \n <action>.
            assert new[b, 3:6].tolist() == [ids["</think>"], ids["\n"], ids["<action>"]]
            assert proc.batch[b].info().think_len == 3


def tds_reference(phis, prev, eta, budget):
    """The spec §4 paper rule on one turn's tries: which try is kept (keep = last)."""
    for i, phi in enumerate(phis):
        if prev is None:
            return i
        hesitant = abs(phi - prev) < eta
        if not hesitant or i == budget:
            return i
    raise AssertionError("more tries than the budget allows")


def test_tds_over_multi_turn_episodes(tiny_model):
    tok, model, ids = load(tiny_model)
    # η large enough that hesitant turns happen on a random model.
    cfg = config_for(ids, eta=0.2, max_resamples=2)
    eos = [ids["<|im_end|>"], ids["<action>"]]
    turns = TdsTurns(model, cfg, episodes=3, eos_token_id=eos, do_sample=True, max_new_tokens=48)
    contexts = [encode(tok, [p]).input_ids[0] for p in PROMPTS[:3]]
    prev = [None] * 3
    torch.manual_seed(11)
    resampled = 0
    for k in range(4):
        kept = turns.sample(contexts)
        for e, r in enumerate(kept):
            phis = [phi for _, phi in r.tries]
            assert all(0.0 < p <= 1.0 for p in phis)
            want = tds_reference(phis, prev[e], cfg.eta, cfg.max_resamples)
            assert r.verdict.kept_try == want == len(phis) - 1, (k, e, phis)
            assert torch.equal(r.tokens, r.tries[want][0]) and r.phi == pytest.approx(phis[want])
            resampled += len(phis) - 1
            prev[e] = r.phi
            # The environment's observation, then the next turn's generation prompt.
            obs = tok(f"<|im_end|>\n<|im_start|>user\nobservation {k}<|im_end|>\n<|im_start|>assistant\n<think>\n",
                      return_tensors="pt").input_ids[0]
            contexts[e] = torch.cat([contexts[e], r.tokens, obs])
    counters = turns.counters()
    assert [c.turns for c in counters] == [4, 4, 4]
    assert sum(c.resamples for c in counters) == resampled
    print(f"hf tds: {resampled} resamples over 12 turns")
    assert resampled > 0, "no hesitant turn: the test did not exercise resampling"
