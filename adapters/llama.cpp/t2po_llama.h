/* t2po_llama.h: a llama.cpp sampler running T²PO's TTI (t2po-control's C ABI).
 *
 * Put it first in the sampler chain, before temperature/top-k/top-p/dist:
 *
 *   struct llama_sampler *chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
 *   llama_sampler_chain_add(chain, t2po_llama_sampler_init(&cfg, prompt, n_prompt));
 *   llama_sampler_chain_add(chain, llama_sampler_init_temp(0.7f));
 *   llama_sampler_chain_add(chain, llama_sampler_init_dist(seed));
 *
 * `apply` sees every candidate with its raw logit (the chain's first sampler), observes the row
 * and, on a forced step, sets every candidate's logit to -inf but the forced token's (0), so any
 * later sampler picks it; `accept` hands the chosen token to the sequence; `reset` starts the
 * generation again from the prompt; `clone` copies the whole state. The experimental backend
 * samplers skip the CPU chain: leave them off. Errors do not abort: the first failing status
 * is kept (t2po_llama_sampler_status) and the sampler stops intervening. */
#ifndef T2PO_LLAMA_H
#define T2PO_LLAMA_H

#include "llama.h"
#include "t2po.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A sampler for one sequence with `cfg` (copied, validated) whose prompt is `prompt[0..n)`
 * (fed to the sequence so that T2PO_THINK_START_FROM_PROMPT starts inside <think> when the
 * prompt ends there). NULL when the config is invalid or memory runs out. */
struct llama_sampler *t2po_llama_sampler_init(const t2po_config *cfg, const llama_token *prompt,
                                              size_t n_prompt);

/* The first non-OK status a kernel call returned (T2PO_STATUS_OK while all went well). */
t2po_status t2po_llama_sampler_status(const struct llama_sampler *smpl);

/* The sequence's state (t2po_seq_inspect) and the step of the last apply. */
t2po_status t2po_llama_sampler_inspect(const struct llama_sampler *smpl, t2po_seq_info *info,
                                       t2po_step *last_step);

/* Φ of the generation so far. */
t2po_status t2po_llama_sampler_turn_signal(const struct llama_sampler *smpl, float *phi);

#ifdef __cplusplus
}
#endif
#endif
