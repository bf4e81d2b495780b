"""The Python binding over the C ABI: load-time checks, Config, Sequence/Batch with every
logits dtype and layout (no copies), TDS, and the error paths."""

import math
import os
import re

import numpy as np
import pytest

import t2po
from t2po import Config, ConfigError, Event, Status, T2poError, ThinkStart

torch = pytest.importorskip("torch") if os.environ.get("T2PO_REQUIRE_TORCH") != "1" else __import__("torch")

HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "t2po-control", "include", "t2po.h")

OPEN, CLOSE, NL, ACT = 5, 6, 7, 8


def small_config(**kw):
    base = dict(think_open=OPEN, think_close=CLOSE, queue=[CLOSE, NL, ACT], min_len=4, max_think=30)
    base.update(kw)
    return Config.paper(**base)


def test_version_and_status_numbers_match_the_header():
    assert t2po.version() == t2po.ABI_VERSION
    text = open(HEADER).read()
    assert int(re.search(r"#define T2PO_ABI_VERSION (\d+)", text).group(1)) == t2po.ABI_VERSION
    body = re.search(r"enum t2po_status\n.*?\{(.*?)\};", text, re.S).group(1)
    header = {m.group(1): int(m.group(2)) for m in re.finditer(r"T2PO_STATUS_(\w+) = (\d+)", body)}
    assert header == {s.name: int(s) for s in Status}
    for kind, enum in (
        ("event", Event),
        ("think_start", ThinkStart),
        ("keep", t2po.Keep),
        ("trigger", t2po.Trigger),
        ("norm", t2po.Norm),
        ("term", t2po.Term),
        ("turn_mean", t2po.TurnMean),
        ("tds_rule", t2po.TdsRule),
    ):
        body = re.search(rf"enum t2po_{kind}\n.*?\{{(.*?)\}};", text, re.S).group(1)
        found = {m.group(1): int(m.group(2)) for m in re.finditer(rf"T2PO_{kind.upper()}_(\w+) = (\d+)", body)}
        assert found == {e.name: int(e) for e in enum}


def test_profiles_hold_every_field():
    paper, released = Config.paper(), Config.released()
    c_fields = [name for name, _ in t2po._ffi.ConfigStruct._fields_ if name != "queue_len"]
    assert list(paper.to_dict()) == c_fields == list(t2po.FIELDS)
    # The spec's values (T2PO-RULES.md §2-§4), a few per profile.
    assert (paper.top_j, paper.window, paper.min_len, paper.max_think) == (20, 4, 16, 500)
    assert paper.trigger == t2po.Trigger.WINDOW_MEAN and paper.turn_mean == t2po.TurnMean.GEOMETRIC
    assert paper.queue == [151668, 198, 27, 1311, 29]
    assert math.isclose(paper.eta, 0.15, rel_tol=1e-6)
    assert (released.top_j, released.max_think, released.queue) == (1, 450, [151668])
    assert released.trigger == t2po.Trigger.PATIENCE and released.tds_rule == t2po.TdsRule.OPEN_INTERVAL
    assert math.isclose(released.eta, 0.3, rel_tol=1e-6)
    # Every field can be set and read back, by number or by name.
    cfg = Config.released(
        top_j=7, alpha=0.25, entropy_norm="running_min_max", entropy_term=t2po.Term.DIRECT,
        confidence_norm=0, confidence_term="complement", range_eps=1e-5, tti_enabled=True,
        trigger="window_mean", window=6, epsilon=0.05, patience=9, patience_tol=1e-3,
        min_len=3, max_think=40, think_open=OPEN, think_close=CLOSE, queue=[CLOSE, NL],
        tds_enabled=0, turn_mean="geometric", phi_floor=1e-4, phi_skip=5, tds_rule="below_eta",
        eta=0.2, max_resamples=4, keep="best",
    )
    d = cfg.to_dict()
    assert d["top_j"] == 7 and d["entropy_term"] == "direct" and d["keep"] == "best"
    assert d["queue"] == [CLOSE, NL] and cfg.queue_len == 2 and d["tds_enabled"] == 0
    assert math.isclose(d["alpha"], 0.25) and math.isclose(d["phi_floor"], 1e-4, rel_tol=1e-6)
    assert cfg == cfg.copy() and cfg != Config.released()


@pytest.mark.parametrize(
    "field, value",
    [
        ("top_j", 0), ("top_j", 65), ("alpha", 1.5), ("alpha", float("nan")),
        ("entropy_norm", 9), ("entropy_term", 9), ("confidence_norm", 9), ("confidence_term", 9),
        ("range_eps", -1.0), ("tti_enabled", 2), ("tds_enabled", 2), ("trigger", 5),
        ("window", 32), ("epsilon", -0.1), ("patience", 0), ("patience_tol", float("inf")),
        ("min_len", 501), ("max_think", 0), ("think_open", 151668), ("queue", []),
        ("queue", [1, 2]), ("turn_mean", 3), ("phi_floor", 0.0), ("tds_rule", 2),
        ("eta", -1.0), ("keep", 2), ("queue", [151668, 2**31]),
    ],
)
def test_validation_errors_name_the_field(field, value):
    with pytest.raises(ConfigError) as err:
        Config.paper(**{field: value})
    assert err.value.field == field, str(err.value)
    assert str(err.value).startswith(field), str(err.value)
    assert isinstance(err.value, ValueError) and err.value.status != Status.OK


@pytest.mark.parametrize(
    "field, value, what",
    [("alpha", "x", "expected a number"), ("window", -1, "0..="), ("window", 1.5, "integer"),
     ("keep", "worst", "one of"), ("alpah", 1, "not a Config field"), ("queue", list(range(9)), "at most 8")],
)
def test_type_errors_name_the_field(field, value, what):
    with pytest.raises(ConfigError) as err:
        Config.paper(**{field: value})
    assert err.value.field == field and what in str(err.value)


def budget_run(seq, rows):
    """Drives one generation over `rows`; returns (fired step index, forced tokens)."""
    fired, forced = None, []
    for i, row in enumerate(rows):
        step = seq.observe(row)
        if step.event != Event.NONE:
            fired = i
        if step.forced is not None:
            forced.append(step.forced)
            seq.accept(step.forced)
        else:
            seq.accept(100)
        if forced and forced[-1] == ACT:
            break
    return fired, forced


def test_sequence_budget_and_queue_order():
    cfg = small_config(epsilon=0.0, min_len=0, max_think=9)  # never converges: L_max fires
    seq = t2po.Sequence(cfg)
    seq.accept_prompt([1, 2, OPEN])
    seq.begin_generation()
    assert seq.info().tti_armed and seq.info().prompt_inside_think
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(40, 128)).astype(np.float32)
    fired, forced = budget_run(seq, rows)
    assert fired == 8 and forced == [CLOSE, NL, ACT]  # 9 content tokens, then the queue
    info = seq.info()
    assert info.think_len == 9 and info.fired_event == Event.BUDGET and not info.inside_think
    assert 0.0 < seq.turn_signal() <= 1.0


def test_prompt_without_think_leaves_tti_visibly_off():
    seq = t2po.Sequence(small_config())
    seq.accept_prompt(np.array([1, 2, 3]))
    seq.begin_generation(ThinkStart.FROM_PROMPT)
    assert not seq.info().tti_armed
    with pytest.raises(T2poError) as err:
        seq.accept_prompt([OPEN])
    assert err.value.status == Status.OUT_OF_ORDER


def test_model_close_on_the_firing_step_is_an_event():
    seq = t2po.Sequence(small_config(min_len=0, max_think=1))
    seq.begin_generation(ThinkStart.INSIDE)
    assert seq.observe(np.zeros(16, np.float32)).event == Event.BUDGET
    assert seq.accept(CLOSE) == Event.MODEL_CLOSED
    assert seq.info().queue_dropped and not seq.info().forcing


def rows_in(dtype_name, rows):
    if dtype_name == "np.float32":
        return rows.astype(np.float32)
    if dtype_name == "np.float16":
        return rows.astype(np.float16)
    tdt = {"torch.float32": torch.float32, "torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16}
    return torch.from_numpy(rows.astype(np.float32)).to(tdt[dtype_name])


@pytest.mark.parametrize("dtype_name", ["np.float32", "np.float16", "torch.float32", "torch.bfloat16", "torch.float16"])
def test_batch_observe_equals_per_row_observe_for_every_dtype(dtype_name):
    B, V, T = 4, 300, 60
    rng = np.random.default_rng(7)
    cfg = small_config()
    batch = t2po.Batch(cfg, B)
    batch.accept_prompts([[1, OPEN]] * B)
    batch.begin_generation()
    singles = [t2po.Sequence(cfg) for _ in range(B)]
    for s in singles:
        s.accept_prompt([1, OPEN])
        s.begin_generation()
    fired = [None] * B
    for t in range(T):
        wide = rng.normal(scale=1.0 + (t % 5), size=(B, V + 13))
        logits = rows_in(dtype_name, wide)[:, :V]  # a row stride wider than the row: no copy
        steps = batch.observe(logits)
        toks = []
        for b in range(B):
            want = singles[b].observe(logits[b])
            assert (steps["forced_token"][b], steps["event"][b], steps["position"][b]) == (
                want.forced_token, int(want.event), want.position)
            assert steps["signal"][b] == np.float32(want.signal)
            if want.event != Event.NONE:
                fired[b] = t
            toks.append(want.forced if want.forced is not None else 100 + b)
            singles[b].accept(toks[-1])
        n = batch.apply(steps, logits)
        assert n == int((steps["forced_token"] >= 0).sum())
        for b in np.flatnonzero(steps["forced_token"] >= 0):
            row = np.asarray(logits[b].float() if hasattr(logits, "float") else logits[b], dtype=np.float64)
            assert row[steps["forced_token"][b]] == 0.0 and np.isneginf(np.delete(row, steps["forced_token"][b])).all()
        batch.accept(toks)
    assert all(f is not None for f in fired), fired
    assert [i.fired_position for i in batch.infos()] == [s.info().fired_position for s in singles]


def test_apply_writes_the_callers_memory():
    seq = t2po.Sequence(small_config(min_len=0, max_think=1))
    seq.begin_generation(ThinkStart.INSIDE)
    row = torch.randn(32)
    seq.observe(row)
    seq.accept(100)
    step = seq.observe(row)
    assert step.forced == CLOSE
    ptr = row.data_ptr()
    assert t2po.Sequence.apply(step, row) and row.data_ptr() == ptr
    assert row[CLOSE].item() == 0.0 and torch.isneginf(row[:CLOSE]).all()


@pytest.mark.parametrize(
    "bad, exc, what",
    [
        (np.zeros((2, 8), np.float64), TypeError, "float64"),
        (np.zeros((8, 2), np.float32).T, ValueError, "contiguous"),
        (np.zeros((2, 2, 2), np.float32), ValueError, "dimensions"),
        ([0.0] * 8, TypeError, "list"),
    ],
)
def test_bad_logits_are_refused_without_copying(bad, exc, what):
    batch = t2po.Batch(small_config(), 2)
    batch.begin_generation(ThinkStart.INSIDE)
    with pytest.raises(exc, match=what):
        batch.observe(bad)


def test_error_statuses():
    batch = t2po.Batch(small_config(), 2)
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(T2poError) as err:
        batch.observe(x)
    assert err.value.rows == {0: Status.OUT_OF_ORDER, 1: Status.OUT_OF_ORDER}
    with pytest.raises(T2poError) as err:
        batch[0].observe(x[0])
    assert err.value.status == Status.OUT_OF_ORDER
    batch.begin_generation(ThinkStart.INSIDE)
    x[1, 3] = np.nan
    with pytest.raises(T2poError) as err:
        batch.observe(x)
    assert err.value.status == Status.BATCH_ROWS and err.value.rows == {1: Status.NAN_LOGIT}
    assert "row 1: a logit is NaN" in str(err.value)
    # Row 0 went on; row 1 is unchanged and can observe again.
    batch.accept([100], rows=[0])
    x[1, 3] = 0.0
    steps = batch.observe(x[1:], rows=[1])
    assert steps["position"][0] == 1
    seq = t2po.Sequence(small_config(min_len=0, max_think=1))
    seq.begin_generation(ThinkStart.INSIDE)
    seq.observe(x[0])
    seq.accept(100)
    assert seq.observe(x[0]).forced == CLOSE
    with pytest.raises(T2poError) as err:
        seq.accept(100)
    assert err.value.status == Status.FORCED_MISMATCH


def test_tds_rule_and_counters():
    tds = t2po.Tds(Config.paper())
    v = tds.decide(0.5)
    assert not v.resample and v.kept_try == 0  # turn 1 is never resampled
    tds.commit()
    assert tds.decide(0.55).resample and tds.decide(0.45).resample  # Γ = 0.05 < η = 0.15
    v = tds.decide(0.52)  # B_max = 2 spent: keep = last
    assert not v.resample and v.kept_try == 2 and math.isclose(v.kept_phi, 0.52, rel_tol=1e-6)
    tds.commit()
    c = tds.counters()
    assert (c.turns, c.resamples, c.tries) == (2, 2, 0) and c.resample_rate == 0.5
    with pytest.raises(T2poError) as err:
        tds.commit()
    assert err.value.status == Status.OUT_OF_ORDER
    with pytest.raises(T2poError) as err:
        tds.decide(float("nan"))
    assert err.value.status == Status.BAD_PHI


def test_tds_pool_on_verl_agent_shaped_batches():
    """A rollout batch like verl-agent's: rows carry a traj_uid; each turn only the hesitant rows
    are regenerated, and each trajectory's decisions equal a standalone Tds fed the same Φ."""
    cfg = Config.paper(max_resamples=2)
    pool = t2po.TdsPool(cfg)
    rng = np.random.default_rng(4)
    uids = np.array([f"traj-{i}" for i in range(6)], dtype=object)
    solo = {u: t2po.Tds(cfg) for u in uids}
    resamples = 0
    for turn in range(5):
        rows = np.arange(len(uids))
        tries = {u: [] for u in uids}
        while len(rows):
            phis = rng.uniform(0.2, 0.6, size=len(rows))
            again = pool.decide(list(uids[rows]), list(phis))
            for r, phi, a in zip(rows, phis, again):
                tries[uids[r]].append(phi)
                v = solo[uids[r]].decide(float(phi))
                assert v.resample == a
            resamples += int(again.sum())
            rows = rows[again]
        for u in uids:
            v = pool.kept(u)
            assert v.kept_try == len(tries[u]) - 1 and v.kept_phi == pytest.approx(tries[u][-1])
            solo[u].commit()
        pool.commit()
    c = pool.counters()
    assert (c.turns, c.resamples) == (30, resamples) and resamples > 0
    with pytest.raises(ValueError, match="twice"):
        pool.decide(["a", "a"], [0.1, 0.2])
    pool.decide(["a"], [0.1])
    with pytest.raises(T2poError):
        pool.decide(["a"], [0.1])
    pool.end(list(uids) + ["a"])
    assert len(pool) == 0


@pytest.mark.parametrize("top_j", [1, 20])
def test_torch_stats_agree_with_the_kernel(top_j):
    """t2po.torch_stats (the accelerator path) against the kernel's statistics, on rows with
    masked (-inf) entries too. Tolerance: 2e-5 relative + 1e-5 absolute (torch f32 log-softmax
    against the kernel's f32 pass, whose own bound vs f64 is 1e-5)."""
    from t2po.torch_stats import token_stats as torch_token_stats

    rng = np.random.default_rng(9)
    rows = rng.normal(scale=3.0, size=(16, 777)).astype(np.float32)
    rows[3, :700] = -np.inf
    rows[5, 10:] = -np.inf  # fewer finite entries than top_j
    stats, count = torch_token_stats(torch.from_numpy(rows), top_j)
    for b in range(rows.shape[0]):
        want = t2po.token_stats(rows[b], top_j)
        got = stats[b].tolist()
        assert int(count[b]) == want.top_count
        for g, w in zip(got, (want.entropy, want.confidence, want.max_logit, want.log_sum_exp)):
            assert abs(g - w) <= 2e-5 * abs(w) + 1e-5, (b, got, want)
