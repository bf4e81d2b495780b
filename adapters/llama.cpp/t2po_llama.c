/* The llama.cpp sampler of t2po_llama.h. */
#include "t2po_llama.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  t2po_seq seq;
  t2po_config cfg;
  llama_token *prompt;
  size_t n_prompt;
  float *row; /* the raw logits gathered by token id */
  size_t n_row;
  t2po_step last;
  t2po_status status;
} t2po_llama_ctx;

static void note(t2po_llama_ctx *c, t2po_status st) {
  if (c->status == T2PO_STATUS_OK) c->status = st;
}

static void start(t2po_llama_ctx *c) {
  note(c, t2po_seq_reset(&c->seq));
  note(c, t2po_seq_accept_prompt(&c->seq, (const uint32_t *)c->prompt, c->n_prompt));
  note(c, t2po_seq_begin_generation(&c->seq, T2PO_THINK_START_FROM_PROMPT));
  c->last.forced_token = -1;
  c->last.event = T2PO_EVENT_NONE;
}

static const char *t2po_name(const struct llama_sampler *smpl) {
  (void)smpl;
  return "t2po";
}

static void t2po_apply(struct llama_sampler *smpl, llama_token_data_array *cur_p) {
  t2po_llama_ctx *c = (t2po_llama_ctx *)smpl->ctx;
  if (c->status != T2PO_STATUS_OK || cur_p->size == 0) return;
  /* Candidates come in any order: gather them by id into a row the kernel reads. */
  size_t n = 0;
  for (size_t i = 0; i < cur_p->size; i++) {
    if (cur_p->data[i].id >= 0 && (size_t)cur_p->data[i].id + 1 > n) n = (size_t)cur_p->data[i].id + 1;
  }
  if (n > c->n_row) {
    float *grown = realloc(c->row, n * sizeof(float));
    if (grown == NULL) {
      note(c, T2PO_STATUS_BAD_SIZE);
      return;
    }
    c->row = grown;
    c->n_row = n;
  }
  for (size_t i = 0; i < n; i++) c->row[i] = -INFINITY;
  for (size_t i = 0; i < cur_p->size; i++) {
    if (cur_p->data[i].id >= 0) c->row[cur_p->data[i].id] = cur_p->data[i].logit;
  }
  t2po_step step;
  t2po_status st = t2po_seq_observe_f32(&c->seq, c->row, n, &step);
  if (st != T2PO_STATUS_OK) {
    note(c, st);
    return;
  }
  c->last = step;
  if (step.forced_token >= 0) {
    for (size_t i = 0; i < cur_p->size; i++) {
      cur_p->data[i].logit = cur_p->data[i].id == step.forced_token ? 0.0f : -INFINITY;
    }
    cur_p->sorted = false;
  }
}

static void t2po_accept(struct llama_sampler *smpl, llama_token token) {
  t2po_llama_ctx *c = (t2po_llama_ctx *)smpl->ctx;
  if (c->status != T2PO_STATUS_OK || token < 0) return;
  uint32_t event;
  note(c, t2po_seq_accept_event(&c->seq, (uint32_t)token, &event));
}

static void t2po_reset(struct llama_sampler *smpl) {
  t2po_llama_ctx *c = (t2po_llama_ctx *)smpl->ctx;
  c->status = T2PO_STATUS_OK;
  start(c);
}

static void t2po_free(struct llama_sampler *smpl) {
  t2po_llama_ctx *c = (t2po_llama_ctx *)smpl->ctx;
  if (c != NULL) {
    free(c->prompt);
    free(c->row);
    free(c);
  }
}

static struct llama_sampler *t2po_clone(const struct llama_sampler *smpl);

static struct llama_sampler_i t2po_iface = {
    .name = t2po_name,
    .accept = t2po_accept,
    .apply = t2po_apply,
    .reset = t2po_reset,
    .clone = t2po_clone,
    .free = t2po_free,
};

static t2po_llama_ctx *new_ctx(const t2po_config *cfg, const llama_token *prompt, size_t n) {
  t2po_llama_ctx *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->cfg = *cfg;
  if (n > 0) {
    c->prompt = malloc(n * sizeof(llama_token));
    if (c->prompt == NULL) {
      free(c);
      return NULL;
    }
    memcpy(c->prompt, prompt, n * sizeof(llama_token));
  }
  c->n_prompt = n;
  return c;
}

static struct llama_sampler *t2po_clone(const struct llama_sampler *smpl) {
  const t2po_llama_ctx *src = (const t2po_llama_ctx *)smpl->ctx;
  t2po_llama_ctx *c = new_ctx(&src->cfg, src->prompt, src->n_prompt);
  if (c == NULL) return NULL;
  c->seq = src->seq; /* plain data: the copy goes on independently */
  c->last = src->last;
  c->status = src->status;
  return llama_sampler_init(&t2po_iface, c);
}

struct llama_sampler *t2po_llama_sampler_init(const t2po_config *cfg, const llama_token *prompt,
                                              size_t n_prompt) {
  if (cfg == NULL || (prompt == NULL && n_prompt > 0)) return NULL;
  for (size_t i = 0; i < n_prompt; i++) {
    if (prompt[i] < 0) return NULL;
  }
  t2po_llama_ctx *c = new_ctx(cfg, prompt, n_prompt);
  if (c == NULL) return NULL;
  if (t2po_seq_init(&c->seq, &c->cfg) != T2PO_STATUS_OK) {
    free(c->prompt);
    free(c);
    return NULL;
  }
  start(c);
  if (c->status != T2PO_STATUS_OK) {
    free(c->prompt);
    free(c);
    return NULL;
  }
  return llama_sampler_init(&t2po_iface, c);
}

t2po_status t2po_llama_sampler_status(const struct llama_sampler *smpl) {
  if (smpl == NULL || smpl->iface != &t2po_iface) return T2PO_STATUS_NULL_POINTER;
  return ((const t2po_llama_ctx *)smpl->ctx)->status;
}

t2po_status t2po_llama_sampler_inspect(const struct llama_sampler *smpl, t2po_seq_info *info,
                                       t2po_step *last_step) {
  if (smpl == NULL || smpl->iface != &t2po_iface) return T2PO_STATUS_NULL_POINTER;
  t2po_llama_ctx *c = (t2po_llama_ctx *)smpl->ctx;
  if (last_step != NULL) *last_step = c->last;
  return info == NULL ? T2PO_STATUS_OK : t2po_seq_inspect(&c->seq, info);
}

t2po_status t2po_llama_sampler_turn_signal(const struct llama_sampler *smpl, float *phi) {
  if (smpl == NULL || smpl->iface != &t2po_iface) return T2PO_STATUS_NULL_POINTER;
  return t2po_seq_turn_signal(&((t2po_llama_ctx *)smpl->ctx)->seq, phi);
}
