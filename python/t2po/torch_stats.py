"""The kernel's per-row statistics (spec §1) computed with torch on the logits' own device, for
engines whose logits live on a GPU: only ``[rows, 4]`` floats then cross to the host, where
``t2po_seq_observe_stats`` runs the state machine. The kernel's f32 CPU pass is the reference;
this is plain torch f32 (max-shifted log-softmax), agreeing with it to ~1e-5 relative (tested),
so a TTI decision sitting exactly on the ε threshold may differ between the two paths."""

from __future__ import annotations

import torch


def token_stats(logits: torch.Tensor, top_j: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(stats [rows, 4] f32 = entropy, confidence, max_logit, log_sum_exp; top_count [rows])``
    of a ``[rows, vocab]`` logits tensor (any float dtype, any device; rows with NaN or +inf
    give non-finite statistics, which ``observe_stats`` refuses)."""
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    logp = x - lse
    p = logp.exp()
    plogp = torch.where(p > 0, p * logp, torch.zeros_like(p))
    entropy = -plogp.sum(dim=-1)
    k = min(int(top_j), x.shape[-1])
    top = torch.topk(logp, k, dim=-1).values
    finite = torch.isfinite(top)
    count = finite.sum(dim=-1)
    conf = -torch.where(finite, top, torch.zeros_like(top)).sum(dim=-1) / count.clamp(min=1)
    stats = torch.stack([entropy.clamp(min=0), conf, x.max(dim=-1).values, lse.squeeze(-1)], dim=-1)
    return stats, count
