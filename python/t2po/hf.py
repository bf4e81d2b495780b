"""Hugging Face transformers integration: a ``LogitsProcessor`` running TTI per batch row, and a
helper that runs TDS over the turns of multi-turn episodes.

    from t2po.hf import T2poLogitsProcessor
    proc = T2poLogitsProcessor(t2po.Config.paper(...))
    out = model.generate(**enc, logits_processor=[proc], do_sample=True)
    proc.finish(out)                     # the last step's tokens (generate does not call back)
    proc.turn_signals(), proc.fired_steps(), proc.records

The processor sees the raw logits (a processor given to ``generate`` runs before temperature,
top-k and top-p), feeds each row's prompt to its own sequence on the first call, then per step
accepts the token the previous step emitted (the last column of ``input_ids``), observes the
row and masks forced rows to their forced token. A row that emitted an end-of-sequence token
is finished: later calls leave its state and its scores alone. One processor serves one
``generate`` call at a time; a call with another batch size or prompt length starts over.
Greedy search and sampling only (beam search reorders rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch
from transformers import LogitsProcessor

from . import Batch, Config, Event, T2poError, Tds, ThinkStart, Verdict


@dataclass
class RowRecord:
    """What one row's sequence did, per generation step (index 0 = the first generated token)."""

    events: list = field(default_factory=list)  # (step, Event) for every TTI event
    forced: list = field(default_factory=list)  # (step, token) for every forced step
    finished_at: Optional[int] = None  # the step whose token ended the row


class T2poLogitsProcessor(LogitsProcessor):
    """TTI inside ``model.generate``. ``eos_token_id``: the ids that end a row (pass the
    model's ``generation_config.eos_token_id``; a processor does not see the model, and a row
    whose end it misses would go on observing its padding steps). ``think_start``: where
    generation starts with respect to ``<think>`` (default: from the prompt's tokens)."""

    def __init__(
        self,
        config: Config,
        eos_token_id: int | Iterable[int] | None = None,
        think_start: ThinkStart = ThinkStart.FROM_PROMPT,
    ):
        config.validate()
        self.config = config.copy()
        if eos_token_id is None:
            self.eos = set()
        elif isinstance(eos_token_id, int):
            self.eos = {eos_token_id}
        else:
            self.eos = set(int(t) for t in eos_token_id)
        self.think_start = ThinkStart(think_start)
        self.batch: Optional[Batch] = None
        self.records: list[RowRecord] = []
        self._finished = np.zeros(0, dtype=bool)
        self._next_len = -1
        self._step = 0

    def _start(self, input_ids: torch.Tensor) -> None:
        rows = input_ids.shape[0]
        self.batch = Batch(self.config, rows)
        prompts = input_ids.detach().cpu().numpy()
        for b in range(rows):
            self.batch[b].accept_prompt(prompts[b])
        self.batch.begin_generation(self.think_start)
        self.records = [RowRecord() for _ in range(rows)]
        self._finished = np.zeros(rows, dtype=bool)
        self._step = 0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows, length = input_ids.shape
        if self.batch is None or rows != self.batch.size or length != self._next_len:
            self._start(input_ids)
        else:
            self._accept_last(input_ids)
        step = self._step
        active = np.flatnonzero(~self._finished)
        if len(active) == rows:
            steps = self.batch.observe(scores)
            self.batch.apply(steps, scores)
            forced, events = steps["forced_token"], steps["event"]
            for b in np.flatnonzero((forced >= 0) | (events != 0)):
                self._note(int(b), step, int(forced[b]), int(events[b]))
        else:
            for b in active:
                seq = self.batch[int(b)]
                s = seq.observe(scores[b])
                seq.apply(s, scores[b])
                if s.forced_token >= 0 or s.event != Event.NONE:
                    self._note(int(b), step, s.forced_token, int(s.event))
        self._step += 1
        self._next_len = length + 1
        return scores

    def _accept_last(self, input_ids: torch.Tensor) -> None:
        last = input_ids[:, -1].tolist()
        prev = self._step - 1
        for b in np.flatnonzero(~self._finished):
            try:
                event = self.batch[int(b)].accept(last[b])
            except T2poError as e:
                raise T2poError(
                    e.status,
                    f"row {b} emitted token {last[b]} at step {prev}: a forced token was "
                    "overridden (beam search, or a later processor that masks it?)",
                ) from None
            if event != Event.NONE:
                self.records[b].events.append((prev, Event(event)))
            if last[b] in self.eos:
                self._finished[b] = True
                self.records[b].finished_at = prev

    def finish(self, sequences: torch.Tensor) -> None:
        """Gives each row the token of the last step: ``generate`` returns without calling its
        processors again, so call this with its output before reading the rows' state or Φ."""
        if self.batch is None or tuple(sequences.shape) != (self.batch.size, self._next_len):
            raise ValueError(
                "finish takes the sequences of the generate call this processor served "
                f"(expected shape ({self.batch.size if self.batch else '?'}, {self._next_len}), "
                f"got {tuple(sequences.shape)})"
            )
        self._accept_last(sequences)
        self._next_len = -1  # the next call starts a new generation

    def _note(self, b: int, step: int, forced: int, event: int) -> None:
        if forced >= 0:
            self.records[b].forced.append((step, forced))
        if event:
            self.records[b].events.append((step, Event(event)))

    def fired_steps(self) -> list[Optional[int]]:
        """Per row, the generation step at which TTI fired (None: it did not)."""
        out = []
        for r in self.records:
            fired = [s for s, e in r.events if e in (Event.CONVERGED, Event.BUDGET)]
            out.append(fired[0] if fired else None)
        return out

    def turn_signals(self) -> np.ndarray:
        """Φ of each row's generation (after ``generate`` returned)."""
        if self.batch is None:
            raise RuntimeError("turn_signals before any generate call")
        return self.batch.turn_signals()


@dataclass
class TurnResult:
    """One turn of one episode under TDS."""

    tokens: torch.Tensor  # the kept try's generated tokens (padding stripped)
    phi: float  # Φ of the kept try
    verdict: Verdict
    tries: list = field(default_factory=list)  # (tokens, Φ) of every try, in order


class TdsTurns:
    """TDS over multi-turn episodes on a transformers model: each episode (batch row) has its
    own ``Tds``; a turn is generated for every episode, hesitant ones are generated again (up to
    ``B_max`` times, only those rows), and the kept try of each episode is returned. The caller
    steps its environments with the kept tokens and builds the next turn's prompts.

        turns = TdsTurns(model, cfg, episodes=4, eos_token_id=eos, do_sample=True, max_new_tokens=64)
        for k in range(K):
            kept = turns.sample(prompts)      # list of TurnResult, one per episode
            prompts = [env.step(r.tokens) ... ]
        turns.counters()                      # turns / resamples per episode
    """

    def __init__(
        self,
        model: Any,
        config: Config,
        episodes: int,
        eos_token_id: int | Iterable[int] | None = None,
        pad_token_id: Optional[int] = None,
        **generate_kwargs: Any,
    ):
        self.model = model
        self.config = config.copy()
        self.tds = [Tds(config) for _ in range(episodes)]
        self.eos = eos_token_id if eos_token_id is not None else model.generation_config.eos_token_id
        self.pad = pad_token_id if pad_token_id is not None else model.generation_config.pad_token_id
        self.generate_kwargs = generate_kwargs

    def begin_episodes(self) -> None:
        for t in self.tds:
            t.begin_episode()

    def _generate(self, prompts: list[torch.Tensor]) -> tuple[list[torch.Tensor], np.ndarray]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):  # left padding
            ids[i, width - len(p) :] = p
            mask[i, width - len(p) :] = 1
        proc = T2poLogitsProcessor(self.config, eos_token_id=self.eos)
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, logits_processor=[proc], **self.generate_kwargs
        )
        if isinstance(out, torch.Tensor):
            proc.finish(out)
        else:
            proc.finish(out.sequences)
            out = out.sequences
        new = out[:, width:]
        phis = proc.turn_signals()
        gen = []
        for i, r in enumerate(proc.records):
            n = (r.finished_at + 1) if r.finished_at is not None else new.shape[1]
            gen.append(new[i, :n].clone())
        return gen, phis

    def sample(self, prompts: list[torch.Tensor]) -> list[TurnResult]:
        """One turn for every episode; ``prompts[e]`` is episode e's full context (1-D ids)."""
        if len(prompts) != len(self.tds):
            raise ValueError(f"{len(prompts)} prompts for {len(self.tds)} episodes")
        tries: list[list] = [[] for _ in prompts]
        done: list[Optional[TurnResult]] = [None] * len(prompts)
        pending = list(range(len(prompts)))
        while pending:
            gen, phis = self._generate([prompts[e] for e in pending])
            still = []
            for j, e in enumerate(pending):
                tries[e].append((gen[j], float(phis[j])))
                v = self.tds[e].decide(float(phis[j]))
                if v.resample:
                    still.append(e)
                else:
                    tokens, _ = tries[e][v.kept_try]
                    done[e] = TurnResult(tokens, v.kept_phi, v, tries[e])
                    self.tds[e].commit()
            pending = still
        return done  # type: ignore[return-value]

    def counters(self):
        return [t.counters() for t in self.tds]
