/* A decode loop over a GGUF model with the T²PO sampler first in the chain (temperature and
 * dist after it). For the test: prints per generated token "gen <k> <token> <event> <forced>"
 * and writes the raw logits of every step, in t2po-control/examples/replay.rs's format, so the
 * Rust kernel can recompute the decisions on the same rows.
 *
 * usage: t2po_llama_decode MODEL.gguf REPLAY_OUT SEED MAX_TOKENS STOP_TOKEN
 *                          think_open think_close min_len max_think QUEUE(csv) PROMPT(csv) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t2po_llama.h"

static size_t parse_csv(const char *s, llama_token *out, size_t cap) {
  size_t n = 0;
  while (*s && n < cap) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s) break;
    out[n++] = (llama_token)v;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

int main(int argc, char **argv) {
  if (argc != 12) {
    fprintf(stderr, "usage: %s MODEL REPLAY_OUT SEED MAX_TOKENS STOP think_open think_close "
                    "min_len max_think QUEUE PROMPT\n", argv[0]);
    return 2;
  }
  uint32_t seed = (uint32_t)strtoul(argv[3], NULL, 10);
  int max_tokens = atoi(argv[4]);
  llama_token stop = (llama_token)atoi(argv[5]);
  t2po_config cfg;
  if (t2po_config_default(T2PO_PROFILE_PAPER, &cfg) != T2PO_STATUS_OK) return 1;
  cfg.think_open = (uint32_t)atoi(argv[6]);
  cfg.think_close = (uint32_t)atoi(argv[7]);
  cfg.min_len = (uint32_t)atoi(argv[8]);
  cfg.max_think = (uint32_t)atoi(argv[9]);
  llama_token queue[T2PO_QUEUE_CAPACITY];
  cfg.queue_len = (uint32_t)parse_csv(argv[10], queue, T2PO_QUEUE_CAPACITY);
  for (uint32_t i = 0; i < cfg.queue_len; i++) cfg.queue[i] = (uint32_t)queue[i];
  char msg[160];
  if (t2po_config_explain(&cfg, msg, sizeof msg) != T2PO_STATUS_OK) {
    fprintf(stderr, "config: %s\n", msg);
    return 1;
  }
  llama_token prompt[512];
  size_t n_prompt = parse_csv(argv[11], prompt, 512);

  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  struct llama_model *model = llama_model_load_from_file(argv[1], mp);
  if (model == NULL) {
    fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  struct llama_context *ctx = llama_init_from_model(model, cp);
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  struct llama_sampler *t2po = t2po_llama_sampler_init(&cfg, prompt, n_prompt);
  if (t2po == NULL) return 1;
  struct llama_sampler *chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(chain, t2po);
  llama_sampler_chain_add(chain, llama_sampler_init_temp(0.8f));
  llama_sampler_chain_add(chain, llama_sampler_init_dist(seed));

  FILE *rep = fopen(argv[2], "w");
  if (rep == NULL) return 1;
  fprintf(rep, "set think_open %u\nset think_close %u\nset min_len %u\nset max_think %u\nset queue",
          cfg.think_open, cfg.think_close, cfg.min_len, cfg.max_think);
  for (uint32_t i = 0; i < cfg.queue_len; i++) fprintf(rep, " %u", cfg.queue[i]);
  fprintf(rep, "\nseq\nprompt");
  for (size_t i = 0; i < n_prompt; i++) fprintf(rep, " %d", prompt[i]);
  fprintf(rep, "\n");

  int rc = 0;
  struct llama_batch batch = llama_batch_get_one(prompt, (int32_t)n_prompt);
  for (int k = 0; k < max_tokens; k++) {
    if (llama_decode(ctx, batch) != 0) {
      fprintf(stderr, "decode failed at step %d\n", k);
      rc = 1;
      break;
    }
    const float *logits = llama_get_logits_ith(ctx, -1);
    static llama_token tok;
    tok = llama_sampler_sample(chain, ctx, -1);
    t2po_step last;
    t2po_llama_sampler_inspect(t2po, NULL, &last);
    if (t2po_llama_sampler_status(t2po) != T2PO_STATUS_OK) {
      fprintf(stderr, "t2po: %s\n", t2po_status_message(t2po_llama_sampler_status(t2po)));
      rc = 1;
      break;
    }
    printf("gen %d %d %u %d\n", k, tok, last.event, last.forced_token);
    fprintf(rep, "step %d", tok);
    for (int i = 0; i < n_vocab; i++) {
      uint32_t bits;
      memcpy(&bits, &logits[i], 4);
      fprintf(rep, " %08x", bits);
    }
    fprintf(rep, "\n");
    if (tok == stop || llama_vocab_is_eog(vocab, tok)) break;
    batch = llama_batch_get_one(&tok, 1);
  }
  fprintf(rep, "end\n");
  fclose(rep);
  /* clone: an independent copy of the state. */
  struct llama_sampler *copy = llama_sampler_clone(t2po);
  t2po_seq_info a, b;
  t2po_llama_sampler_inspect(t2po, &a, NULL);
  t2po_llama_sampler_inspect(copy, &b, NULL);
  if (memcmp(&a, &b, sizeof a) != 0) {
    fprintf(stderr, "clone differs\n");
    rc = 1;
  }
  llama_sampler_reset(copy);
  t2po_llama_sampler_inspect(copy, &b, NULL);
  printf("info generated %u fired %u event %u clone_after_reset_generated %u armed %u\n",
         a.generated, a.fired_position, a.fired_event, b.generated, b.tti_armed);
  llama_sampler_free(copy);
  llama_sampler_free(chain);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return rc;
}
