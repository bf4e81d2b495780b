"""vLLM V1 integration: a logits processor running TTI per request, per-request on/off and
config through ``SamplingParams(extra_args={"t2po": ...})``.

    from vllm import LLM, SamplingParams
    llm = LLM(model=..., logits_processors=[t2po.vllm.T2poLogitsProcessor])  # or the class
    # path "t2po.vllm:T2poLogitsProcessor"; installing t2po also registers it under the
    # `vllm.logits_processors` entry point, which vLLM loads for every LLM.
    sp = SamplingParams(max_tokens=512, extra_args={"t2po": {"think_open": 151667, ...}})

``extra_args["t2po"]`` is ``True`` (the processor's default config), a dict of
:class:`t2po.Config` fields (with an optional ``"profile": "paper" | "released"``), or absent /
``False``: the request is untouched. The processor's default config is ``Config.paper()``
(Qwen3 token ids), or the JSON object in the environment variable ``T2PO_VLLM_CONFIG``, or
``vllm_config.additional_config["t2po"]`` (a dict as above). With ``"all_requests": true`` in
that default, requests without ``extra_args["t2po"]`` get T²PO too: that is how an engine
launched by a framework that builds its own ``SamplingParams`` (verl) is switched on without
changing the framework (``docs/scale-out.md``). ``is_argmax_invariant()`` is False, so vLLM runs it on the raw f32 logits, before
penalties and temperature. Each request's tokens reach its sequence through the output-token
list vLLM hands over when the request joins (``len(output_ids)`` says what is new), so requests
that join late or move between batch slots keep their own state.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

import ctypes
import json
import os
import time

from . import Config, Event, Sequence, T2poError, ThinkStart, _rows
from ._ffi import StepStruct, lib
from ._ffi import TokenStatsStruct as StatsStruct

try:
    from vllm.v1.sample.logits_processor import (
        BatchUpdate,
        LogitsProcessor,
        MoveDirectionality,
    )
except ImportError as e:  # pragma: no cover - exercised only without vLLM
    raise ImportError(f"t2po.vllm needs vLLM (V1 logits-processor interface): {e}") from e


def config_from_args(value: Any, default: Config) -> Optional[Config]:
    """The config a request's ``extra_args["t2po"]`` asks for (None: T²PO off).
    Raises ValueError (a :class:`t2po.ConfigError`) naming a bad field."""
    if value is None or value is False:
        return None
    if value is True:
        return default
    if isinstance(value, Config):
        return value.validate()
    if not isinstance(value, dict):
        raise ValueError(f"extra_args['t2po'] = {value!r}: expected True, False or a dict of Config fields")
    fields = dict(value)
    if fields.pop("enabled", True) is False:
        return None
    profile = fields.pop("profile", None)
    if profile is None:
        cfg = default.copy()
        for k, v in fields.items():
            setattr(cfg, k, v)
        return cfg.validate()
    return Config(profile, **fields)


class _Row:
    """One request's controller and the reference to its running output-token list."""

    __slots__ = ("seq", "ptr", "step", "step_ref", "event", "event_ref", "prompt", "output",
                 "seen", "events", "forced", "fired_at", "joined_at", "seq_top_j")

    def __init__(self, cfg: Config, prompt: Optional[list], output: list):
        self.seq = Sequence(cfg)
        self.seq_top_j = int(cfg.top_j)
        # The hot path calls the C ABI directly with these (no per-step Python objects).
        self.ptr = self.seq._ptr
        self.step = StepStruct()
        self.step_ref = ctypes.byref(self.step)
        self.event = ctypes.c_uint32(0)
        self.event_ref = ctypes.byref(self.event)
        self.prompt = tuple(prompt or ())
        # A request that comes back after preemption already has outputs: they were generated
        # without us seeing their rows, so they join the prompt (TTI restarts after them).
        self.seq.accept_prompt(list(prompt or []) + list(output))
        self.seq.begin_generation(ThinkStart.FROM_PROMPT)
        self.output = output
        self.seen = len(output)
        self.events: list = []
        self.forced: list = []
        self.fired_at: Optional[int] = None
        self.joined_at = 0  # the processor's apply count when the request joined

    def catch_up(self) -> None:
        while self.seen < len(self.output):
            token = self.output[self.seen]
            if token < 0:  # a placeholder of asynchronous scheduling: not known yet
                return
            st = lib.t2po_seq_accept_event(self.ptr, token, self.event_ref)
            if st:
                raise T2poError(st, f"vLLM emitted token {token} at step {self.seen}")
            if self.event.value:
                self.events.append((self.seen, Event(self.event.value)))
            self.seen += 1


class T2poLogitsProcessor(LogitsProcessor):
    """TTI for the requests that ask for it (see the module doc)."""

    #: The most recent instance (one per engine process), for tests and metrics.
    last_instance: Optional["T2poLogitsProcessor"] = None

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        extra = getattr(sampling_params, "extra_args", None) or {}
        if "t2po" in extra:
            config_from_args(extra["t2po"], Config.paper())

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool):
        # CPU logits go to the kernel in place; on an accelerator the statistics are computed
        # there by torch (t2po.torch_stats) and only they cross to the host.
        self.stats_on_device = torch.device(device).type != "cpu" or os.environ.get(
            "T2PO_VLLM_TORCH_STATS") == "1"
        extra = getattr(vllm_config, "additional_config", None) or {}
        default = extra.get("t2po") if isinstance(extra, dict) else None
        env = os.environ.get("T2PO_VLLM_CONFIG")
        if env:
            try:
                default = json.loads(env)
            except json.JSONDecodeError as e:
                raise ValueError(f"T2PO_VLLM_CONFIG is not JSON: {e}") from None
        if default is not None and not isinstance(default, dict):
            raise ValueError(f"the t2po default config must be a JSON object, got {default!r}")
        default = dict(default or {})
        #: Requests without extra_args["t2po"] get the default config too.
        self.all_requests = bool(default.pop("all_requests", False))
        self.default = config_from_args(default, Config.paper()) if default else Config.paper()
        self.rows: dict[int, _Row] = {}
        #: Finished requests' rows by request order (for inspection), newest last.
        self.finished: list[_Row] = []
        self.steps = 0
        #: Seconds spent in this processor's update_state and apply (its whole per-step cost).
        self.seconds = 0.0
        #: How many batch changes of each kind this instance processed.
        self.changes = {"added": 0, "removed": 0, "moved": 0, "swapped": 0}
        T2poLogitsProcessor.last_instance = self

    def take_turn_signals(self) -> dict:
        """Φ of every finished or running request, keyed by ``(prompt ids, output ids)`` (None
        where the turn has no token in Φ), and forgets the finished ones: a rollout worker in
        the engine's process calls this after ``generate`` to hand Φ to TDS."""
        out = {}
        for row in self.all_rows():
            key = (row.prompt, tuple(row.output))
            try:
                out[key] = row.seq.turn_signal()
            except T2poError:
                out[key] = None
        self.finished = []
        return out

    def all_rows(self) -> list:
        """Every request this instance controlled, finished ones first (for inspection: a
        request that finished in the last step stays listed under ``rows`` until vLLM removes
        it at the next step)."""
        return self.finished + list(self.rows.values())

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: Optional[BatchUpdate]) -> None:
        t0 = time.perf_counter()
        try:
            self._update(batch_update)
        finally:
            self.seconds += time.perf_counter() - t0

    def _update(self, batch_update: Optional[BatchUpdate]) -> None:
        if batch_update is not None:
            for index in batch_update.removed:
                self.changes["removed"] += 1
                row = self.rows.pop(index, None)
                if row is not None:
                    row.catch_up()
                    self.finished.append(row)
            for index, params, prompt, output in batch_update.added:
                old = self.rows.pop(index, None)
                if old is not None:  # vLLM replaces a finished request's slot without a removal
                    old.catch_up()
                    self.finished.append(old)
                extra = getattr(params, "extra_args", None) or {}
                if "t2po" in extra:
                    cfg = config_from_args(extra["t2po"], self.default)
                else:
                    cfg = self.default if self.all_requests else None
                self.changes["added"] += 1
                if cfg is not None:
                    row = _Row(cfg, prompt, output)
                    row.joined_at = self.steps
                    self.rows[index] = row
            for a, b, direction in batch_update.moved:
                ra, rb = self.rows.pop(a, None), self.rows.pop(b, None)
                if direction == MoveDirectionality.SWAP:
                    self.changes["swapped"] += 1
                    if ra is not None:
                        self.rows[b] = ra
                    if rb is not None:
                        self.rows[a] = rb
                else:  # a -> b; whatever was at b is replaced
                    self.changes["moved"] += 1
                    if ra is not None:
                        self.rows[b] = ra
        for row in self.rows.values():
            row.catch_up()

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        t0 = time.perf_counter()
        try:
            self._apply(logits)
        finally:
            self.seconds += time.perf_counter() - t0
        return logits

    def _apply(self, logits: torch.Tensor) -> None:
        self.steps += 1
        if self.stats_on_device or logits.device.type != "cpu":
            self._apply_device(logits)
            return
        addr, kind, n, vocab, stride = _rows(logits, writable=True)
        observe = getattr(lib, f"t2po_seq_observe_{kind}")
        mask = getattr(lib, f"t2po_step_apply_{kind}")
        row_bytes = stride * (4 if kind == "f32" else 2)
        for index, row in self.rows.items():
            if index >= n:
                continue
            line = addr + index * row_bytes
            st = observe(row.ptr, line, vocab, row.step_ref)
            if st:
                raise T2poError(st, f"observe of the request in batch slot {index}")
            step = row.step
            if step.event:
                row.events.append((row.seen, Event(step.event)))
                if row.fired_at is None:
                    row.fired_at = row.seen
            if step.forced_token >= 0:
                row.forced.append((row.seen, step.forced_token))
                st = mask(row.step_ref, line, vocab)
                if st:
                    raise T2poError(st, f"masking the request in batch slot {index}")

    def _apply_device(self, logits: torch.Tensor) -> None:
        from .torch_stats import token_stats

        n, vocab = logits.shape
        slots = [i for i in self.rows if i < n]
        if not slots:
            return
        idx = torch.tensor(slots, device=logits.device)
        by_j: dict = {}
        for i in slots:
            by_j.setdefault(self.rows[i].seq_top_j, []).append(i)
        host: dict = {}
        for j, group in by_j.items():
            sel = idx if len(by_j) == 1 else torch.tensor(group, device=logits.device)
            stats, count = token_stats(logits.index_select(0, sel), j)
            stats, count = stats.cpu().tolist(), count.cpu().tolist()
            for g, st, c in zip(group, stats, count):
                host[g] = (st, c)
        for i in slots:
            row = self.rows[i]
            (h, conf, mx, lse), c = host[i]
            ts = StatsStruct(h, conf, mx, lse, vocab, c)
            st = lib.t2po_seq_observe_stats(row.ptr, ctypes.byref(ts), row.step_ref)
            if st:
                raise T2poError(st, f"observe of the request in batch slot {i}")
            step = row.step
            if step.event:
                row.events.append((row.seen, Event(step.event)))
                if row.fired_at is None:
                    row.fired_at = row.seen
            if step.forced_token >= 0:
                row.forced.append((row.seen, step.forced_token))
                if step.forced_token >= vocab:
                    raise T2poError(44, f"forced token {step.forced_token} outside the row of {vocab}")
                logits[i].fill_(float("-inf"))
                logits[i, step.forced_token] = 0.0
