"""Property tests of the bindings' bad inputs (hypothesis): Batch, Sequence, Tds, token_stats
and the transformers processor fed random shapes, dtypes, strides, NaN/inf rows, out-of-range
ids and calls in any order. Every call either works or raises TypeError, ValueError,
IndexError or T2poError with a message naming the problem; none crashes the interpreter (a
segfault fails the whole run) and none wraps a bad integer into a good one. The state machines
also check the spec's invariants that hold whatever the calls: a forced token is accepted, at
most B_max resamples per turn, TDS counters consistent."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis") if os.environ.get("T2PO_REQUIRE_TORCH") != "1" else __import__("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule  # noqa: E402

import t2po  # noqa: E402
from t2po import Config, Event, Sequence, T2poError, Tds  # noqa: E402

torch = pytest.importorskip("torch") if os.environ.get("T2PO_REQUIRE_TORCH") != "1" else __import__("torch")

# Derandomised in CI (the same examples every run, so a failure reproduces); T2PO_HYPOTHESIS_EXAMPLES
# raises the count for a longer local search.
settings.register_profile(
    "t2po",
    max_examples=int(os.environ.get("T2PO_HYPOTHESIS_EXAMPLES", "200")),
    deadline=None,
    derandomize=os.environ.get("T2PO_HYPOTHESIS_EXAMPLES") is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("t2po")

# NaN/inf/huge values cast to f16 or f32 overflow on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

OPEN, CLOSE, NL, ACT = 5, 6, 7, 8
VOCAB = 24
ALLOWED = (TypeError, ValueError, IndexError, T2poError)


def config(**kw):
    base = dict(think_open=OPEN, think_close=CLOSE, queue=[CLOSE, NL, ACT], min_len=3, max_think=12)
    base.update(kw)
    return Config.paper(**base)


def attempt(fn, *args, **kw):
    """fn's result, or the allowed exception it raised (whose message must say something)."""
    try:
        return fn(*args, **kw)
    except ALLOWED as e:
        assert str(e).strip(), f"{type(e).__name__} without a message"
        return e


# ---------------------------------------------------------------------------------------------
# Arrays: numpy or torch, any dtype, 0-3 dimensions, any layout, NaN/inf values

VALUES = st.one_of(
    st.floats(-50, 50, width=32),
    st.sampled_from([math.nan, math.inf, -math.inf, 3.0e38, -3.0e38, 0.0, -0.0]),
)
NP_DTYPES = ["float32", "float16", "float64", "int32", "int64", "bool", "complex64"]
TORCH_DTYPES = ["float32", "float16", "bfloat16", "float64", "int32", "bool"]
LAYOUTS = ["contiguous", "transposed", "every_other_column", "every_other_row", "reversed_rows",
           "broadcast", "read_only", "fortran"]


@st.composite
def arrays(draw, max_rows=5):
    backend = draw(st.sampled_from(["numpy", "torch"]))
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(0, max_rows)) for _ in range(ndim - 1)) + ((draw(st.integers(0, 2 * VOCAB)),) if ndim else ())
    n = int(np.prod(shape)) if shape else 1
    values = np.array(draw(st.lists(VALUES, min_size=n, max_size=n)), dtype=np.float64).reshape(shape)
    layout = draw(st.sampled_from(LAYOUTS))
    if backend == "numpy":
        dtype = draw(st.sampled_from(NP_DTYPES))
        with np.errstate(all="ignore"):
            a = values.astype(dtype)
        if ndim >= 2 and layout == "transposed":
            a = a.swapaxes(-1, -2)
        elif ndim >= 1 and layout == "every_other_column":
            a = a[..., ::2]
        elif ndim >= 2 and layout == "every_other_row":
            a = a[::2]
        elif ndim >= 1 and layout == "reversed_rows":
            a = a[::-1]
        elif ndim >= 2 and layout == "broadcast" and a.shape[0]:
            a = np.broadcast_to(a[:1], (3,) + a.shape[1:])
        elif layout == "read_only":
            a.flags.writeable = False
        elif ndim >= 2 and layout == "fortran":
            a = np.asfortranarray(a)
        return a
    dtype = getattr(torch, draw(st.sampled_from(TORCH_DTYPES)))
    t = torch.from_numpy(values.copy()).to(dtype)
    if ndim >= 2 and layout == "transposed":
        t = t.transpose(-1, -2)
    elif ndim >= 1 and layout == "every_other_column":
        t = t[..., ::2]
    elif ndim >= 2 and layout == "every_other_row":
        t = t[::2]
    elif ndim >= 2 and layout == "broadcast" and t.shape[0]:
        t = t[:1].expand(3, *t.shape[1:])
    return t


def ids():
    """Token ids, good and bad: in range, negative, past u32, bools, floats, None, strings."""
    return st.one_of(
        st.integers(0, VOCAB - 1),
        st.integers(-(2**40), 2**40),
        st.sampled_from([-1, 2**32, 2**32 + OPEN, 2**63, True, 1.5, None, "7", np.int64(3), np.uint64(2**33)]),
    )


# ---------------------------------------------------------------------------------------------
# One call at a time


@given(arrays(), st.one_of(st.integers(-3, 40), st.sampled_from([2**32 + 1, 1.5, None])))
def test_token_stats_takes_any_array(a, top_j):
    out = attempt(t2po.token_stats, a, top_j)
    if not isinstance(out, Exception):
        assert out.vocab == a.shape[-1] and out.top_count >= 1


@given(arrays(max_rows=1), st.booleans())
def test_sequence_observe_and_apply_take_any_row(a, begin):
    seq = Sequence(config())
    seq.accept_prompt([1, OPEN, 2])
    if begin:
        seq.begin_generation()
    step = attempt(seq.observe, a)
    if isinstance(step, Exception):
        return
    assert begin, "observe before begin_generation must be refused"
    changed = attempt(Sequence.apply, step, a)
    if changed is True:
        row = np.asarray(a.float() if hasattr(a, "float") else a, dtype=np.float64)
        assert np.argmax(row) == step.forced_token


@given(st.integers(-2, 5), arrays(), st.one_of(st.none(), st.lists(st.one_of(st.integers(-3, 7), st.sampled_from([1.0, True, None])), max_size=6)))
def test_batch_observe_takes_any_logits_and_rows(size, a, rows):
    batch = attempt(t2po.Batch, config(), size)
    if isinstance(batch, Exception):
        assert size < 1
        return
    batch.accept_prompts([[1, OPEN]] * size)
    batch.begin_generation()
    steps = attempt(batch.observe, a, rows)
    if isinstance(steps, Exception):
        return
    assert len(steps) == (1 if a.ndim == 1 else a.shape[0])
    attempt(batch.apply, steps, a)
    chosen = list(range(size)) if rows is None else rows
    tokens = [int(f) if f >= 0 else 1 for f in steps["forced_token"]]
    attempt(batch.accept, tokens, None if rows is None else chosen)


@given(st.lists(ids(), max_size=8), st.one_of(st.integers(-2, 4), st.sampled_from([2**32 + 1, 1.5, "from_prompt", None])))
def test_prompts_and_starts_out_of_range_are_refused_not_wrapped(tokens, start):
    seq = Sequence(config())
    out = attempt(seq.accept_prompt, tokens)
    good = all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and 0 <= int(t) < 2**32 for t in tokens)
    if not good:
        # A list mixing types may still convert (numpy casts 1.5 or True to an integer array
        # only when every element is one kind); out-of-range integers never pass.
        if any(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and not 0 <= int(t) < 2**32 for t in tokens):
            assert isinstance(out, Exception)
    out = attempt(seq.begin_generation, start)
    if isinstance(start, int) and not isinstance(start, bool) and start not in {int(s) for s in t2po.ThinkStart}:
        assert isinstance(out, Exception), f"start {start} accepted"


# ---------------------------------------------------------------------------------------------
# Calls in any order


class SequenceMachine(RuleBasedStateMachine):
    """Any order of reset / accept_prompt / begin_generation / observe / observe_stats /
    accept / turn_signal / info on one sequence: every call works or raises an allowed error;
    a forced token is always accepted; info is always readable and consistent."""

    @initialize(min_len=st.integers(1, 6), max_think=st.integers(6, 14))
    def start(self, min_len, max_think):
        self.cfg = config(min_len=min_len, max_think=max_think)
        self.seq = Sequence(self.cfg)
        self.forced = None  # the forced token the last observe returned

    @rule()
    def reset(self):
        self.seq.reset()
        self.forced = None

    @rule(tokens=st.lists(st.one_of(st.integers(0, VOCAB - 1), st.just(OPEN), st.just(CLOSE)), max_size=6))
    def accept_prompt(self, tokens):
        attempt(self.seq.accept_prompt, tokens)

    @rule(start=st.one_of(st.sampled_from(list(t2po.ThinkStart)), st.integers(-1, 5)))
    def begin(self, start):
        if not isinstance(attempt(self.seq.begin_generation, start), Exception):
            self.forced = None

    @rule(values=st.lists(VALUES, min_size=VOCAB, max_size=VOCAB), dtype=st.sampled_from(["float32", "float16"]))
    def observe(self, values, dtype):
        row = np.array(values, dtype=np.float64).astype(dtype)
        step = attempt(self.seq.observe, row)
        if not isinstance(step, Exception):
            self.forced = step.forced_token if step.forced_token >= 0 else None
            assert step.forced_token >= -1

    @rule(entropy=VALUES, confidence=VALUES, vocab=st.integers(-1, 2 * VOCAB), top=st.integers(-1, 30))
    def observe_stats(self, entropy, confidence, vocab, top):
        step = attempt(self.seq.observe_stats, entropy, confidence, vocab, top)
        if not isinstance(step, Exception):
            self.forced = step.forced_token if step.forced_token >= 0 else None

    @precondition(lambda self: self.forced is not None)
    @rule()
    def accept_forced(self):
        event = self.seq.accept(self.forced)  # never refused
        assert event in (Event.NONE, Event.MODEL_CLOSED) or isinstance(event, Event)
        self.forced = None

    @rule(token=ids())
    def accept_any(self, token):
        before = self.seq.info()
        out = attempt(self.seq.accept, token)
        if isinstance(out, Exception):
            assert self.seq.info() == before, "a refused accept changed the state"
        else:
            assert isinstance(token, (int, np.integer)) and 0 <= int(token) < 2**32
            self.forced = None

    @rule()
    def signal(self):
        phi = attempt(self.seq.turn_signal)
        if not isinstance(phi, Exception):
            assert math.isfinite(phi) and phi >= 0

    @invariant()
    def info_is_consistent(self):
        if not hasattr(self, "seq"):
            return
        info = self.seq.info()
        assert info.generated <= info.position
        assert info.think_len <= info.generated
        assert info.think_len <= self.cfg.max_think + len(self.cfg.queue)


TestSequenceMachine = SequenceMachine.TestCase


class TdsMachine(RuleBasedStateMachine):
    """Any order of begin_episode / decide / commit / counters on one episode's TDS, checked
    against a model of the spec: a resample only when |Φ − Φ of the last kept turn| < η (in
    f32), at most B_max resamples in a turn, the counters equal to the model's, bad Φ refused."""

    @initialize(b_max=st.integers(0, 4), eta=st.floats(0.01, 0.9))
    def start(self, b_max, eta):
        self.b_max = b_max
        self.tds = Tds(config(max_resamples=b_max, eta=eta))
        self.eta = np.float32(eta)
        self.in_turn = 0  # resamples of the current turn
        self.turns = 0
        self.resamples = 0
        self.prev = None  # Φ of the last committed turn of this episode
        self.kept = None  # Φ of this turn's kept try, awaiting commit

    @rule()
    def begin(self):
        self.tds.begin_episode()
        self.in_turn, self.prev, self.kept = 0, None, None

    @rule(phi=st.one_of(st.floats(0, 1), VALUES, st.sampled_from([None, "0.5", 1e300])))
    def decide(self, phi):
        v = attempt(self.tds.decide, phi)
        if isinstance(v, Exception):
            return
        assert self.kept is None, "a second decide after a keep verdict was accepted"
        phi32 = np.float32(phi)
        if v.resample:
            self.in_turn += 1
            assert self.in_turn <= self.b_max, f"{self.in_turn} resamples with B_max = {self.b_max}"
            assert self.prev is not None and abs(phi32 - self.prev) < self.eta
        else:
            assert 0 <= v.kept_try <= self.in_turn
            self.kept = np.float32(v.kept_phi)

    @rule()
    def commit(self):
        out = attempt(self.tds.commit)
        if isinstance(out, Exception):
            assert self.kept is None
            return
        assert self.kept is not None, "commit without a keep verdict was accepted"
        self.turns += 1
        self.resamples += self.in_turn
        self.in_turn, self.prev, self.kept = 0, self.kept, None

    @invariant()
    def counters_match_the_model(self):
        if not hasattr(self, "tds"):
            return
        c = self.tds.counters()
        assert (c.turns, c.resamples, c.tries) == (self.turns, self.resamples, self.in_turn)
        assert c.resamples <= c.turns * self.b_max
        assert 0.0 <= c.resample_rate <= 1.0


TestTdsMachine = TdsMachine.TestCase


# ---------------------------------------------------------------------------------------------
# The transformers processor


@given(
    st.integers(0, 4),
    st.integers(0, 6),
    arrays(),
    st.sampled_from(["long", "int32", "float32", "1-D", "3-D"]),
    st.integers(1, 3),
)
def test_hf_processor_takes_any_shapes(rows, length, scores, ids_kind, calls):
    hf = pytest.importorskip("t2po.hf") if os.environ.get("T2PO_REQUIRE_TRANSFORMERS") != "1" else __import__("t2po.hf").hf
    proc = hf.T2poLogitsProcessor(config(), eos_token_id=[ACT])
    input_ids = torch.randint(0, VOCAB, (rows, length))
    if ids_kind == "int32":
        input_ids = input_ids.to(torch.int32)
    elif ids_kind == "float32":
        input_ids = input_ids.float()
    elif ids_kind == "1-D":
        input_ids = input_ids.flatten()
    elif ids_kind == "3-D":
        input_ids = input_ids[None]
    for _ in range(calls):
        out = attempt(proc, input_ids, scores)
        if isinstance(out, Exception):
            break
        assert out is scores
        if input_ids.dim() == 2:
            input_ids = torch.cat([input_ids, torch.zeros(input_ids.shape[0], 1, dtype=input_ids.dtype)], 1)
    attempt(proc.finish, input_ids)
