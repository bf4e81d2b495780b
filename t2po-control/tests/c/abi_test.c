/* A real C engine loop against include/t2po.h, built by tests/c_abi.rs with
 * -fsanitize=address,undefined and linked with the static library.
 * Covers: a full decode loop with a TTI forced stop (f32, bf16, f16 rows, batched), TDS over
 * turns, and every error path of the ABI; the version and layout queries a binding checks at
 * load, the bulk prompt accept, the TTI-armed flag, the model-closed event, TDS counters and
 * the statistics with per-chunk masses. Prints "c abi: N checks passed" on success. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t2po.h"

static int checks = 0;
static int failures = 0;

#define CHECK(cond)                                                           \
  do {                                                                        \
    checks++;                                                                 \
    if (!(cond)) {                                                            \
      failures++;                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                         \
  } while (0)

#define EXPECT_STATUS(call, want)                                              \
  do {                                                                         \
    t2po_status got_ = (call);                                                 \
    checks++;                                                                  \
    if (got_ != (want)) {                                                      \
      failures++;                                                              \
      fprintf(stderr, "%s:%d: %s returned %u (%s), want %u\n", __FILE__,       \
              __LINE__, #call, (unsigned)got_, t2po_status_message(got_),      \
              (unsigned)(want));                                               \
    }                                                                          \
  } while (0)

enum { V = 4096 };

static uint32_t rng_state = 12345u;
static float frand(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)((rng_state >> 8) & 0xFFFFFF) / 16777216.0f;
}

/* A stand-in model: at position t the logits are noise whose peak sharpens, so M_t settles. */
static void model_logits(float *row, int t) {
  float sharp = t < 8 ? 1.0f : 6.0f;
  for (int i = 0; i < V; i++) row[i] = frand();
  row[(t * 31) % V] += sharp;
}

static uint16_t to_bf16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  return (uint16_t)(bits >> 16);
}

static uint16_t to_f16(float x) { /* values here are small and positive */
  uint32_t b;
  memcpy(&b, &x, 4);
  uint32_t sign = (b >> 16) & 0x8000u;
  int32_t exp = (int32_t)((b >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = (b >> 13) & 0x3FFu;
  if (exp <= 0) return (uint16_t)sign;
  if (exp >= 31) return (uint16_t)(sign | 0x7C00u);
  return (uint16_t)(sign | ((uint32_t)exp << 10) | mant);
}

static t2po_config test_config(void) {
  t2po_config cfg;
  EXPECT_STATUS(t2po_config_default(T2PO_PROFILE_PAPER, &cfg), T2PO_STATUS_OK);
  /* A small vocabulary: ids of our own. */
  cfg.think_open = 10;
  cfg.think_close = 11;
  cfg.queue_len = 3;
  cfg.queue[0] = 11;
  cfg.queue[1] = 12;
  cfg.queue[2] = 13;
  cfg.min_len = 8;
  cfg.max_think = 64;
  return cfg;
}

/* One generation with one row type; returns the think content length. */
static int decode_loop(t2po_seq *seq, int kind, int *forced_seen, uint32_t *fired_at) {
  float row[V];
  uint16_t half_row[V];
  int content = 0;
  *forced_seen = 0;
  *fired_at = 0;
  EXPECT_STATUS(t2po_seq_reset(seq), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_accept(seq, 1), T2PO_STATUS_OK);  /* prompt tokens */
  EXPECT_STATUS(t2po_seq_accept(seq, 10), T2PO_STATUS_OK); /* prompt ends with <think> */
  EXPECT_STATUS(t2po_seq_begin_generation(seq, T2PO_THINK_START_FROM_PROMPT), T2PO_STATUS_OK);
  for (int t = 0; t < 200; t++) {
    t2po_step step;
    model_logits(row, t);
    t2po_status st;
    if (kind == 0) {
      st = t2po_seq_observe_f32(seq, row, V, &step);
    } else if (kind == 1) {
      for (int i = 0; i < V; i++) half_row[i] = to_bf16(row[i]);
      st = t2po_seq_observe_bf16(seq, half_row, V, &step);
    } else {
      for (int i = 0; i < V; i++) half_row[i] = to_f16(row[i]);
      st = t2po_seq_observe_f16(seq, half_row, V, &step);
    }
    EXPECT_STATUS(st, T2PO_STATUS_OK);
    if (step.event != T2PO_EVENT_NONE) *fired_at = step.position;
    uint32_t token;
    if (step.forced_token >= 0) {
      /* The engine masks the row and samples: only the forced token survives. */
      EXPECT_STATUS(t2po_step_apply_f32(&step, row, V), T2PO_STATUS_OK);
      int best = 0;
      for (int i = 1; i < V; i++) if (row[i] > row[best]) best = i;
      CHECK(best == step.forced_token && row[best] == 0.0f);
      token = (uint32_t)best;
      (*forced_seen)++;
    } else {
      token = 100 + (uint32_t)(t % 50); /* ordinary think/action tokens */
    }
    EXPECT_STATUS(t2po_seq_accept(seq, token), T2PO_STATUS_OK);
    t2po_seq_info info;
    EXPECT_STATUS(t2po_seq_inspect(seq, &info), T2PO_STATUS_OK);
    if (info.inside_think) content = (int)info.think_len;
    if (token == 13) break; /* end of the forced "<action>" */
  }
  return content;
}

static void full_loops(void) {
  t2po_config cfg = test_config();
  t2po_seq seq;
  CHECK(t2po_seq_size() == sizeof(t2po_seq));
  CHECK(t2po_seq_align() == _Alignof(t2po_seq));
  EXPECT_STATUS(t2po_seq_init(&seq, &cfg), T2PO_STATUS_OK);
  for (int kind = 0; kind < 3; kind++) {
    int forced;
    uint32_t fired_at;
    int content = decode_loop(&seq, kind, &forced, &fired_at);
    CHECK(forced == 3);                  /* the whole queue, in order */
    CHECK(fired_at >= cfg.min_len);      /* never before L_min */
    CHECK(content <= (int)cfg.max_think);
    float phi = -1.0f;
    EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_OK);
    CHECK(phi > 0.0f && phi <= 1.0f);
    printf("c abi: row kind %d fired at t=%u, think content %d tokens, phi %.4f\n", kind,
           fired_at, content, phi);
  }

  /* Budget: epsilon 0 never converges, so L_max = 5 stops thinking. */
  cfg.epsilon = 0.0f;
  cfg.min_len = 0;
  cfg.max_think = 5;
  EXPECT_STATUS(t2po_seq_init(&seq, &cfg), T2PO_STATUS_OK);
  int forced;
  uint32_t fired_at;
  int content = decode_loop(&seq, 0, &forced, &fired_at);
  CHECK(forced == 3 && content == 5);
  t2po_seq_info info;
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.fired_event == T2PO_EVENT_BUDGET);
}

static void batched(void) {
  enum { B = 4, STRIDE = V + 16 };
  t2po_config cfg = test_config();
  t2po_seq *seqs = malloc(sizeof(t2po_seq) * B);
  float *logits = malloc(sizeof(float) * B * STRIDE);
  t2po_step steps[B];
  for (int b = 0; b < B; b++) {
    EXPECT_STATUS(t2po_seq_init(&seqs[b], &cfg), T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_begin_generation(&seqs[b], T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
  }
  int forced_total = 0;
  for (int t = 0; t < 120; t++) {
    for (int b = 0; b < B; b++) model_logits(logits + (size_t)b * STRIDE, t + b);
    EXPECT_STATUS(t2po_seq_observe_batch_f32(seqs, B, logits, V, STRIDE, steps), T2PO_STATUS_OK);
    for (int b = 0; b < B; b++) {
      CHECK(steps[b].status == T2PO_STATUS_OK);
      uint32_t tok = steps[b].forced_token >= 0 ? (uint32_t)steps[b].forced_token : 200;
      if (steps[b].forced_token >= 0) forced_total++;
      EXPECT_STATUS(t2po_seq_accept(&seqs[b], tok), T2PO_STATUS_OK);
    }
  }
  CHECK(forced_total == 3 * B);
  /* A NaN in row 2: that row fails with its own status, the others go on. */
  for (int b = 0; b < B; b++) model_logits(logits + (size_t)b * STRIDE, b);
  logits[2 * STRIDE + 7] = NAN;
  EXPECT_STATUS(t2po_seq_observe_batch_f32(seqs, B, logits, V, STRIDE, steps),
                T2PO_STATUS_BATCH_ROWS);
  CHECK(steps[2].status == T2PO_STATUS_NAN_LOGIT && steps[0].status == T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_observe_batch_f32(seqs, B, logits, V, V - 1, steps), T2PO_STATUS_BAD_SIZE);
  EXPECT_STATUS(t2po_seq_observe_batch_f32(seqs, 0, logits, V, STRIDE, steps), T2PO_STATUS_BAD_SIZE);
  EXPECT_STATUS(t2po_seq_observe_batch_f32(NULL, B, logits, V, STRIDE, steps), T2PO_STATUS_NULL_POINTER);
  free(seqs);
  free(logits);
}

/* Twin batches of `n` sequences under `cfg`, each generating inside a think block. */
static void start_twins(t2po_seq *plain, t2po_seq *with, int n, const t2po_config *cfg) {
  for (int b = 0; b < n; b++) {
    EXPECT_STATUS(t2po_seq_init(&plain[b], cfg), T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_init(&with[b], cfg), T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_begin_generation(&plain[b], T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_begin_generation(&with[b], T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
  }
}

/* The batched step that also hands back each read row's statistics: over 150 rows (several of
 * the entry point's internal chunks) and 120 steps, its steps equal the plain batched call's on
 * twin sequences, and each read row's statistics equal t2po_token_stats_f32 of that row; forced
 * and failed rows get vocab = 0. */
static void batched_stats(void) {
  enum { B = 150, STRIDE = V + 8 };
  t2po_config cfg = test_config();
  t2po_seq *plain = malloc(sizeof(t2po_seq) * B);
  t2po_seq *with = malloc(sizeof(t2po_seq) * B);
  float *logits = malloc(sizeof(float) * B * STRIDE);
  t2po_step *a = malloc(sizeof(t2po_step) * B);
  t2po_step *b_steps = malloc(sizeof(t2po_step) * B);
  t2po_token_stats *stats = malloc(sizeof(t2po_token_stats) * B);
  start_twins(plain, with, B, &cfg);
  int read_rows = 0, forced_rows = 0, mismatches = 0;
  for (int t = 0; t < 120; t++) {
    for (int b = 0; b < B; b++) model_logits(logits + (size_t)b * STRIDE, t + b);
    EXPECT_STATUS(t2po_seq_observe_batch_f32(plain, B, logits, V, STRIDE, a), T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_observe_batch_stats_f32(with, B, logits, V, STRIDE, b_steps, stats),
                  T2PO_STATUS_OK);
    for (int b = 0; b < B; b++) {
      if (memcmp(&a[b], &b_steps[b], sizeof(t2po_step)) != 0) mismatches++;
      if (a[b].forced_token >= 0) {
        forced_rows++;
        if (stats[b].vocab != 0) mismatches++;
      } else {
        t2po_token_stats want;
        EXPECT_STATUS(t2po_token_stats_f32(logits + (size_t)b * STRIDE, V, cfg.top_j, &want),
                      T2PO_STATUS_OK);
        read_rows++;
        if (memcmp(&want, &stats[b], sizeof(want)) != 0) mismatches++;
      }
      uint32_t tok = a[b].forced_token >= 0 ? (uint32_t)a[b].forced_token : 200;
      EXPECT_STATUS(t2po_seq_accept(&plain[b], tok), T2PO_STATUS_OK);
      EXPECT_STATUS(t2po_seq_accept(&with[b], tok), T2PO_STATUS_OK);
    }
  }
  CHECK(mismatches == 0);
  CHECK(forced_rows == 3 * B && read_rows == 120 * B - 3 * B);
  /* A NaN in row 100 (the second chunk): that row fails with its own status and vocab = 0,
   * the others are read. */
  for (int b = 0; b < B; b++) model_logits(logits + (size_t)b * STRIDE, b);
  logits[100 * STRIDE + 7] = NAN;
  EXPECT_STATUS(t2po_seq_observe_batch_stats_f32(with, B, logits, V, STRIDE, b_steps, stats),
                T2PO_STATUS_BATCH_ROWS);
  CHECK(b_steps[100].status == T2PO_STATUS_NAN_LOGIT && stats[100].vocab == 0);
  CHECK(b_steps[99].status == T2PO_STATUS_OK && stats[99].vocab == V);
  CHECK(b_steps[149].status == T2PO_STATUS_OK && stats[149].vocab == V);
  EXPECT_STATUS(t2po_seq_observe_batch_stats_f32(with, B, logits, V, STRIDE, b_steps, NULL),
                T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_seq_observe_batch_stats_f32(with, B, logits, V, V - 1, b_steps, stats),
                T2PO_STATUS_BAD_SIZE);
  /* bf16 and f16 rows take the same path as their plain batched calls. */
  uint16_t *half = malloc(sizeof(uint16_t) * B * STRIDE);
  for (int b = 0; b < B; b++) {
    EXPECT_STATUS(t2po_seq_begin_generation(&plain[b], T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_begin_generation(&with[b], T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
  }
  for (int kind = 0; kind < 2; kind++) {
    for (size_t i = 0; i < (size_t)B * STRIDE; i++)
      half[i] = kind == 0 ? to_bf16(frand() * 4.0f) : to_f16(frand() * 4.0f);
    t2po_status sa = kind == 0 ? t2po_seq_observe_batch_bf16(plain, B, half, V, STRIDE, a)
                               : t2po_seq_observe_batch_f16(plain, B, half, V, STRIDE, a);
    t2po_status sb =
        kind == 0 ? t2po_seq_observe_batch_stats_bf16(with, B, half, V, STRIDE, b_steps, stats)
                  : t2po_seq_observe_batch_stats_f16(with, B, half, V, STRIDE, b_steps, stats);
    CHECK(sa == T2PO_STATUS_OK && sb == T2PO_STATUS_OK);
    int same = 1;
    for (int b = 0; b < B; b++) {
      same &= memcmp(&a[b], &b_steps[b], sizeof(t2po_step)) == 0;
      same &= a[b].forced_token >= 0 ? stats[b].vocab == 0 : stats[b].vocab == V;
      EXPECT_STATUS(t2po_seq_accept(&plain[b], 200), T2PO_STATUS_OK);
      EXPECT_STATUS(t2po_seq_accept(&with[b], 200), T2PO_STATUS_OK);
    }
    CHECK(same);
  }
  free(half);
  free(plain);
  free(with);
  free(logits);
  free(a);
  free(b_steps);
  free(stats);
}

/* t2po_token_stats_mass_*: the statistics of t2po_token_stats_* byte for byte, chunk masses
 * that sum to e^(lse - max) and match a double sum of each chunk, and the size errors. */
static void stats_mass(void) {
  enum { N = 5000, CHUNKS = (N + T2PO_MASS_CHUNK - 1) / T2PO_MASS_CHUNK };
  float *row = malloc(sizeof(float) * N);
  uint16_t *half = malloc(sizeof(uint16_t) * N);
  double mass[CHUNKS + 1];
  t2po_token_stats want, got;
  for (int i = 0; i < N; i++) row[i] = frand() * 6.0f - 3.0f;
  for (int i = 2048; i < 2100; i++) row[i] = -INFINITY; /* masked tokens */
  EXPECT_STATUS(t2po_token_stats_f32(row, N, 20, &want), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_token_stats_mass_f32(row, N, 20, mass, CHUNKS, &got), T2PO_STATUS_OK);
  CHECK(memcmp(&want, &got, sizeof want) == 0);
  double total = 0.0;
  for (int k = 0; k < CHUNKS; k++) {
    double exact = 0.0;
    for (int i = k * T2PO_MASS_CHUNK; i < N && i < (k + 1) * T2PO_MASS_CHUNK; i++)
      exact += exp((double)row[i] - (double)got.max_logit);
    CHECK(fabs(mass[k] - exact) <= 1e-5 * exact);
    total += mass[k];
  }
  CHECK(fabs(total - exp((double)got.log_sum_exp - (double)got.max_logit)) <= 1e-5 * total);
  for (int i = 0; i < N; i++) half[i] = to_bf16(row[i]);
  EXPECT_STATUS(t2po_token_stats_bf16(half, N, 20, &want), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_token_stats_mass_bf16(half, N, 20, mass, CHUNKS, &got), T2PO_STATUS_OK);
  CHECK(memcmp(&want, &got, sizeof want) == 0);
  for (int i = 0; i < N; i++) half[i] = to_f16(frand() * 4.0f);
  EXPECT_STATUS(t2po_token_stats_f16(half, N, 20, &want), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_token_stats_mass_f16(half, N, 20, mass, CHUNKS, &got), T2PO_STATUS_OK);
  CHECK(memcmp(&want, &got, sizeof want) == 0);
  /* One mass entry too few or too many, none, or no buffer. */
  EXPECT_STATUS(t2po_token_stats_mass_f32(row, N, 20, mass, CHUNKS - 1, &got), T2PO_STATUS_BAD_SIZE);
  EXPECT_STATUS(t2po_token_stats_mass_f32(row, N, 20, mass, CHUNKS + 1, &got), T2PO_STATUS_BAD_SIZE);
  EXPECT_STATUS(t2po_token_stats_mass_f32(row, N, 20, mass, 0, &got), T2PO_STATUS_BAD_SIZE);
  EXPECT_STATUS(t2po_token_stats_mass_f32(row, N, 20, NULL, CHUNKS, &got), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_token_stats_mass_f32(row, N, 20, mass, CHUNKS, NULL), T2PO_STATUS_NULL_POINTER);
  free(half);
  free(row);
}

/* t2po_seq_observe_batch_mass_*: 70 sequences (beyond the entry point's 64-row chunks) over rows
 * of three mass chunks; steps and statistics equal t2po_seq_observe_batch_stats_f32's on twin
 * sequences, each read row's masses equal t2po_token_stats_mass_f32 of that row, a forced row's
 * are left as they were; size and NULL errors. */
static void batched_mass(void) {
  enum { B = 70, VM = 5000, STRIDE = VM + 8, N = (VM + T2PO_MASS_CHUNK - 1) / T2PO_MASS_CHUNK };
  t2po_config cfg = test_config();
  t2po_seq *plain = malloc(sizeof(t2po_seq) * B);
  t2po_seq *with = malloc(sizeof(t2po_seq) * B);
  float *logits = malloc(sizeof(float) * B * STRIDE);
  uint16_t *half = malloc(sizeof(uint16_t) * B * STRIDE);
  t2po_step *a = malloc(sizeof(t2po_step) * B);
  t2po_step *b_steps = malloc(sizeof(t2po_step) * B);
  t2po_token_stats *sa = malloc(sizeof(t2po_token_stats) * B);
  t2po_token_stats *sb = malloc(sizeof(t2po_token_stats) * B);
  double *mass = malloc(sizeof(double) * B * N);
  double want[N];
  t2po_token_stats ws;
  start_twins(plain, with, B, &cfg);
  int read_rows = 0, forced_rows = 0, mismatches = 0;
  for (int t = 0; t < 40; t++) {
    for (int b = 0; b < B; b++) {
      float *row = logits + (size_t)b * STRIDE;
      for (int i = 0; i < VM; i++) row[i] = frand();
      row[((t + b) * 31) % VM] += t < 8 ? 1.0f : 6.0f;
    }
    for (int i = 0; i < B * N; i++) mass[i] = -1.0;
    EXPECT_STATUS(t2po_seq_observe_batch_stats_f32(plain, B, logits, VM, STRIDE, a, sa),
                  T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_observe_batch_mass_f32(with, B, logits, VM, STRIDE, b_steps, sb, mass,
                                                  (size_t)B * N),
                  T2PO_STATUS_OK);
    for (int b = 0; b < B; b++) {
      if (memcmp(&a[b], &b_steps[b], sizeof(t2po_step)) != 0) mismatches++;
      if (memcmp(&sa[b], &sb[b], sizeof(t2po_token_stats)) != 0) mismatches++;
      if (a[b].forced_token >= 0) {
        forced_rows++;
        for (int k = 0; k < N; k++)
          if (mass[b * N + k] != -1.0) mismatches++;
      } else {
        read_rows++;
        EXPECT_STATUS(t2po_token_stats_mass_f32(logits + (size_t)b * STRIDE, VM, cfg.top_j, want, N,
                                                &ws),
                      T2PO_STATUS_OK);
        if (memcmp(want, mass + b * N, sizeof want) != 0) mismatches++;
      }
      uint32_t tok = a[b].forced_token >= 0 ? (uint32_t)a[b].forced_token : 200;
      EXPECT_STATUS(t2po_seq_accept(&plain[b], tok), T2PO_STATUS_OK);
      EXPECT_STATUS(t2po_seq_accept(&with[b], tok), T2PO_STATUS_OK);
    }
  }
  CHECK(mismatches == 0);
  CHECK(forced_rows > 0 && read_rows > 0 && forced_rows + read_rows == 40 * B);
  /* bf16 rows: masses equal the single-row call's on the same bits. */
  for (int i = 0; i < B * STRIDE; i++) half[i] = to_bf16(frand() * 4.0f);
  for (int b = 0; b < B; b++) {
    EXPECT_STATUS(t2po_seq_begin_generation(&with[b], T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
  }
  EXPECT_STATUS(t2po_seq_observe_batch_mass_bf16(with, B, half, VM, STRIDE, b_steps, sb, mass,
                                                 (size_t)B * N),
                T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_token_stats_mass_bf16(half + 69 * STRIDE, VM, cfg.top_j, want, N, &ws),
                T2PO_STATUS_OK);
  CHECK(memcmp(want, mass + 69 * N, sizeof want) == 0 && memcmp(&ws, &sb[69], sizeof ws) == 0);
  for (int b = 0; b < B; b++) {
    EXPECT_STATUS(t2po_seq_accept(&with[b], 200), T2PO_STATUS_OK);
  }
  /* Sizes and NULL: nothing observed (the sequences still accept a fresh observe). */
  EXPECT_STATUS(t2po_seq_observe_batch_mass_f32(with, B, logits, VM, STRIDE, b_steps, sb, mass,
                                                (size_t)B * N - 1),
                T2PO_STATUS_BAD_SIZE);
  EXPECT_STATUS(t2po_seq_observe_batch_mass_f32(with, B, logits, VM, STRIDE, b_steps, sb, NULL,
                                                (size_t)B * N),
                T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_seq_observe_batch_mass_f16(with, B, half, VM, STRIDE, b_steps, sb, mass,
                                                (size_t)B * N + 1),
                T2PO_STATUS_BAD_SIZE);
  EXPECT_STATUS(t2po_seq_observe_batch_mass_f32(with, B, logits, VM, STRIDE, b_steps, sb, mass,
                                                (size_t)B * N),
                T2PO_STATUS_OK);
  free(mass);
  free(sb);
  free(sa);
  free(b_steps);
  free(a);
  free(half);
  free(logits);
  free(with);
  free(plain);
}

static void tds_turns(void) {
  t2po_config cfg;
  EXPECT_STATUS(t2po_config_default(T2PO_PROFILE_PAPER, &cfg), T2PO_STATUS_OK);
  t2po_tds tds;
  t2po_tds_verdict v;
  EXPECT_STATUS(t2po_tds_init(&tds, &cfg), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_tds_decide(&tds, 0.5f, &v), T2PO_STATUS_OK);
  CHECK(v.resample == 0 && v.kept_try == 0); /* turn 1 */
  EXPECT_STATUS(t2po_tds_decide(&tds, 0.5f, &v), T2PO_STATUS_OUT_OF_ORDER);
  EXPECT_STATUS(t2po_tds_commit(&tds), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_tds_decide(&tds, 0.55f, &v), T2PO_STATUS_OK);
  CHECK(v.resample == 1);
  EXPECT_STATUS(t2po_tds_decide(&tds, 0.9f, &v), T2PO_STATUS_OK);
  CHECK(v.resample == 0 && v.kept_try == 1);
  EXPECT_STATUS(t2po_tds_commit(&tds), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_tds_commit(&tds), T2PO_STATUS_OUT_OF_ORDER);
  EXPECT_STATUS(t2po_tds_decide(&tds, NAN, &v), T2PO_STATUS_BAD_PHI);
  EXPECT_STATUS(t2po_tds_begin_episode(&tds), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_tds_decide(&tds, 0.9f, &v), T2PO_STATUS_OK);
  CHECK(v.resample == 0);
  CHECK(t2po_tds_size() == sizeof(t2po_tds));
}

static void error_paths(void) {
  t2po_config cfg;
  t2po_seq seq;
  t2po_step step;
  t2po_token_stats stats;
  float row[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  float phi;

  EXPECT_STATUS(t2po_config_default(T2PO_PROFILE_PAPER, &cfg), T2PO_STATUS_OK);
  /* NULL everywhere. */
  EXPECT_STATUS(t2po_config_default(0, NULL), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_config_validate(NULL), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_token_stats_f32(NULL, 8, 1, &stats), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_token_stats_f32(row, 8, 1, NULL), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_seq_init(NULL, &cfg), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_seq_accept(NULL, 1), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_seq_observe_f32(NULL, row, 8, &step), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_tds_commit(NULL), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_step_apply_f32(NULL, row, 8), T2PO_STATUS_NULL_POINTER);

  /* Misaligned pointers. */
  char raw[sizeof(float) * 9];
  EXPECT_STATUS(t2po_token_stats_f32((const float *)(raw + 1), 8, 1, &stats), T2PO_STATUS_MISALIGNED);

  /* Config errors: profile and every field class. */
  EXPECT_STATUS(t2po_config_default(7, &cfg), T2PO_STATUS_BAD_KIND);
#define CFG_CASE(stmt, want)                                                 \
  do {                                                                       \
    EXPECT_STATUS(t2po_config_default(T2PO_PROFILE_PAPER, &cfg), T2PO_STATUS_OK); \
    stmt;                                                                    \
    EXPECT_STATUS(t2po_config_validate(&cfg), want);                         \
    EXPECT_STATUS(t2po_seq_init(&seq, &cfg), want);                          \
  } while (0)
  CFG_CASE(cfg.top_j = 0, T2PO_STATUS_BAD_TOP_J);
  CFG_CASE(cfg.top_j = 65, T2PO_STATUS_BAD_TOP_J);
  CFG_CASE(cfg.alpha = 1.5f, T2PO_STATUS_BAD_ALPHA);
  CFG_CASE(cfg.alpha = NAN, T2PO_STATUS_BAD_ALPHA);
  CFG_CASE(cfg.trigger = 9, T2PO_STATUS_BAD_KIND);
  CFG_CASE(cfg.entropy_norm = 9, T2PO_STATUS_BAD_KIND);
  CFG_CASE(cfg.tti_enabled = 2, T2PO_STATUS_BAD_FLAG);
  CFG_CASE(cfg.epsilon = -1.0f, T2PO_STATUS_BAD_TOLERANCE);
  CFG_CASE(cfg.window = 32, T2PO_STATUS_BAD_WINDOW);
  CFG_CASE(cfg.patience = 0, T2PO_STATUS_BAD_PATIENCE);
  CFG_CASE(cfg.min_len = 501, T2PO_STATUS_BAD_LENGTHS);
  CFG_CASE(cfg.max_think = 0, T2PO_STATUS_BAD_LENGTHS);
  CFG_CASE(cfg.think_open = cfg.think_close, T2PO_STATUS_BAD_THINK_TOKENS);
  CFG_CASE(cfg.queue_len = 0, T2PO_STATUS_BAD_QUEUE);
  CFG_CASE(cfg.queue_len = 9, T2PO_STATUS_BAD_QUEUE);
  CFG_CASE(cfg.queue[0] = 5, T2PO_STATUS_BAD_QUEUE);
  CFG_CASE(cfg.phi_floor = 0.0f, T2PO_STATUS_BAD_PHI_FLOOR);

  /* Uninitialised state is refused (memset to garbage, not init'd). */
  memset(&seq, 0xAB, sizeof seq);
  EXPECT_STATUS(t2po_seq_accept(&seq, 1), T2PO_STATUS_NOT_INITIALIZED);
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_NOT_INITIALIZED);
  t2po_tds tds;
  memset(&tds, 0, sizeof tds);
  EXPECT_STATUS(t2po_tds_commit(&tds), T2PO_STATUS_NOT_INITIALIZED);

  /* Row errors: empty, NaN, +inf, all -inf; outputs untouched on error. */
  memset(&stats, 0x5A, sizeof stats);
  t2po_token_stats before = stats;
  EXPECT_STATUS(t2po_token_stats_f32(row, 0, 1, &stats), T2PO_STATUS_BAD_SIZE);
  EXPECT_STATUS(t2po_token_stats_f32(row, 8, 0, &stats), T2PO_STATUS_BAD_TOP_J);
  row[3] = NAN;
  EXPECT_STATUS(t2po_token_stats_f32(row, 8, 1, &stats), T2PO_STATUS_NAN_LOGIT);
  row[3] = INFINITY;
  EXPECT_STATUS(t2po_token_stats_f32(row, 8, 1, &stats), T2PO_STATUS_POS_INF_LOGIT);
  for (int i = 0; i < 8; i++) row[i] = -INFINITY;
  EXPECT_STATUS(t2po_token_stats_f32(row, 8, 1, &stats), T2PO_STATUS_NO_FINITE_LOGIT);
  CHECK(memcmp(&stats, &before, sizeof stats) == 0);
  row[5] = 1.0f;
  EXPECT_STATUS(t2po_token_stats_f32(row, 8, 4, &stats), T2PO_STATUS_OK);
  CHECK(stats.top_count == 1 && stats.entropy == 0.0f && stats.max_logit == 1.0f);
  uint16_t hrow[4] = {0x3F80, 0x4000, 0xFF80 /* -inf */, 0x7FC0 /* NaN */};
  EXPECT_STATUS(t2po_token_stats_bf16(hrow, 3, 2, &stats), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_token_stats_bf16(hrow, 4, 2, &stats), T2PO_STATUS_NAN_LOGIT);
  uint16_t frow[2] = {0x3C00, 0x7C00 /* +inf */};
  EXPECT_STATUS(t2po_token_stats_f16(frow, 2, 2, &stats), T2PO_STATUS_POS_INF_LOGIT);

  /* Order errors. */
  cfg = test_config();
  EXPECT_STATUS(t2po_seq_init(&seq, &cfg), T2PO_STATUS_OK);
  for (int i = 0; i < 8; i++) row[i] = (float)i;
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OUT_OF_ORDER);
  EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_EMPTY_TURN);
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, 3), T2PO_STATUS_BAD_KIND);
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_accept(&seq, 5), T2PO_STATUS_OUT_OF_ORDER);
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OUT_OF_ORDER);
  EXPECT_STATUS(t2po_seq_accept(&seq, 5), T2PO_STATUS_OK);
  t2po_token_stats given = {2.0f, 3.0f, 1.0f, 2.5f, 8, 4};
  EXPECT_STATUS(t2po_seq_observe_stats(&seq, &given, &step), T2PO_STATUS_OK);
  CHECK(step.position == 2);
  EXPECT_STATUS(t2po_seq_accept(&seq, 5), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, NULL), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_seq_turn_signal(&seq, NULL), T2PO_STATUS_NULL_POINTER);

  /* Forced mismatch: budget 1 forces </think> (id 11) next. */
  cfg.min_len = 0;
  cfg.max_think = 1;
  EXPECT_STATUS(t2po_seq_init(&seq, &cfg), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
  CHECK(step.event == T2PO_EVENT_BUDGET && step.forced_token == -1);
  EXPECT_STATUS(t2po_seq_accept(&seq, 5), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
  CHECK(step.forced_token == 11);
  EXPECT_STATUS(t2po_seq_accept(&seq, 5), T2PO_STATUS_FORCED_MISMATCH);
  EXPECT_STATUS(t2po_seq_accept(&seq, 11), T2PO_STATUS_OK);

  /* Apply errors: forced id outside the row. */
  t2po_step bad = step;
  bad.forced_token = 8;
  EXPECT_STATUS(t2po_step_apply_f32(&bad, row, 8), T2PO_STATUS_TOKEN_OUT_OF_ROW);
  EXPECT_STATUS(t2po_step_apply_f32(&bad, row, 0), T2PO_STATUS_BAD_SIZE);
  bad.forced_token = -1;
  EXPECT_STATUS(t2po_step_apply_f32(&bad, row, 8), T2PO_STATUS_OK);
  CHECK(row[7] == 7.0f);
  uint16_t hb[4] = {0x3F80, 0x3F80, 0x3F80, 0x3F80};
  bad.forced_token = 1;
  EXPECT_STATUS(t2po_step_apply_bf16(&bad, hb, 4), T2PO_STATUS_OK);
  CHECK(hb[0] == 0xFF80 && hb[1] == 0x0000);
  EXPECT_STATUS(t2po_step_apply_f16(&bad, hb, 4), T2PO_STATUS_OK);
  CHECK(hb[0] == 0xFC00 && hb[1] == 0x0000);

  /* Messages exist for every value, known or not. */
  CHECK(strcmp(t2po_status_message(T2PO_STATUS_OK), "ok") == 0);
  CHECK(strlen(t2po_status_message(9999)) > 0);
}

/* What a binding in another language checks at load and relies on. */
static void layout_and_version(void) {
  CHECK(t2po_version() == T2PO_ABI_VERSION);
#define LAYOUT(T, size_fn, align_fn) \
  CHECK(size_fn() == sizeof(T) && align_fn() == _Alignof(T))
  LAYOUT(t2po_seq, t2po_seq_size, t2po_seq_align);
  LAYOUT(t2po_tds, t2po_tds_size, t2po_tds_align);
  LAYOUT(t2po_config, t2po_config_size, t2po_config_align);
  LAYOUT(t2po_token_stats, t2po_token_stats_size, t2po_token_stats_align);
  LAYOUT(t2po_step, t2po_step_size, t2po_step_align);
  LAYOUT(t2po_seq_info, t2po_seq_info_size, t2po_seq_info_align);
  LAYOUT(t2po_tds_verdict, t2po_tds_verdict_size, t2po_tds_verdict_align);
  LAYOUT(t2po_tds_counters, t2po_tds_counters_size, t2po_tds_counters_align);
#undef LAYOUT
}

static void prompt_and_events(void) {
  t2po_config cfg = test_config();
  t2po_seq seq;
  t2po_seq_info info;
  t2po_step step;
  float row[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_STATUS(t2po_seq_init(&seq, &cfg), T2PO_STATUS_OK);

  /* A prompt without <think>: TTI is visibly off after FROM_PROMPT. */
  const uint32_t plain[3] = {1, 2, 3};
  EXPECT_STATUS(t2po_seq_accept_prompt(&seq, plain, 3), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_FROM_PROMPT), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.tti_armed == 0 && info.prompt_inside_think == 0 && info.inside_think == 0);
  /* ... and the bulk accept is refused while generating, changing nothing. */
  t2po_seq_info before;
  EXPECT_STATUS(t2po_seq_inspect(&seq, &before), T2PO_STATUS_OK);
  const uint32_t think[1] = {10};
  EXPECT_STATUS(t2po_seq_accept_prompt(&seq, think, 1), T2PO_STATUS_OUT_OF_ORDER);
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.prompt_inside_think == before.prompt_inside_think &&
        info.inside_think == before.inside_think && info.generated == before.generated);

  /* The prompt ending in <think>, in one call: armed; n == 0 with NULL is an empty prompt. */
  EXPECT_STATUS(t2po_seq_reset(&seq), T2PO_STATUS_OK);
  const uint32_t prompt[4] = {1, 2, 3, 10};
  EXPECT_STATUS(t2po_seq_accept_prompt(&seq, prompt, 4), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_accept_prompt(&seq, NULL, 0), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_accept_prompt(&seq, NULL, 2), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_seq_accept_prompt(NULL, prompt, 4), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_FROM_PROMPT), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.tti_armed == 1 && info.prompt_inside_think == 1 && info.inside_think == 1);

  /* prompt_inside_think reports where the generation starts: a declared think_start wins over
   * what the prompt tokens left, and a FROM_PROMPT retry starts where the first try did. */
  EXPECT_STATUS(t2po_seq_reset(&seq), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_accept_prompt(&seq, plain, 3), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.prompt_inside_think == 0);
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.prompt_inside_think == 1 && info.inside_think == 1 && info.tti_armed == 1);
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_FROM_PROMPT), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.prompt_inside_think == 1 && info.inside_think == 1);
  EXPECT_STATUS(t2po_seq_reset(&seq), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_accept_prompt(&seq, prompt, 4), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.prompt_inside_think == 1);
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_OUTSIDE), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.prompt_inside_think == 0 && info.inside_think == 0 && info.tti_armed == 0);

  /* tti_enabled = 0: inside think, but not armed. */
  t2po_config off = cfg;
  off.tti_enabled = 0;
  t2po_seq quiet;
  EXPECT_STATUS(t2po_seq_init(&quiet, &off), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_begin_generation(&quiet, T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_inspect(&quiet, &info), T2PO_STATUS_OK);
  CHECK(info.tti_armed == 0 && info.inside_think == 1);

  /* The model closes </think> itself on the firing step: MODEL_CLOSED, queue dropped. */
  cfg.min_len = 0;
  cfg.max_think = 1;
  EXPECT_STATUS(t2po_seq_init(&seq, &cfg), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
  CHECK(step.event == T2PO_EVENT_BUDGET);
  uint32_t event = 99;
  EXPECT_STATUS(t2po_seq_accept_event(&seq, 11, NULL), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_seq_accept_event(&seq, 11, &event), T2PO_STATUS_OK);
  CHECK(event == T2PO_EVENT_MODEL_CLOSED);
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.queue_dropped == 1 && info.forcing == 0 && info.tti_armed == 0);
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
  CHECK(step.forced_token == -1);
  EXPECT_STATUS(t2po_seq_accept_event(&seq, 5, &event), T2PO_STATUS_OK);
  CHECK(event == T2PO_EVENT_NONE); /* reported once */

  /* The queue served in full is not "dropped". */
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_INSIDE), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_accept_event(&seq, 5, &event), T2PO_STATUS_OK);
  CHECK(event == T2PO_EVENT_NONE);
  for (int k = 0; k < 3; k++) {
    EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
    CHECK(step.forced_token == 11 + k);
    EXPECT_STATUS(t2po_seq_accept_event(&seq, (uint32_t)step.forced_token, &event), T2PO_STATUS_OK);
    CHECK(event == T2PO_EVENT_NONE);
  }
  EXPECT_STATUS(t2po_seq_inspect(&seq, &info), T2PO_STATUS_OK);
  CHECK(info.queue_dropped == 0 && info.fired_event == T2PO_EVENT_BUDGET);

  /* Negative forced tokens other than -1 are refused, the row untouched. */
  t2po_step bad = {.forced_token = -2};
  EXPECT_STATUS(t2po_step_apply_f32(&bad, row, 8), T2PO_STATUS_BAD_FORCED_TOKEN);
  bad.forced_token = INT32_MIN;
  uint16_t hrow[2] = {0x3F80, 0x3F80};
  EXPECT_STATUS(t2po_step_apply_bf16(&bad, hrow, 2), T2PO_STATUS_BAD_FORCED_TOKEN);
  EXPECT_STATUS(t2po_step_apply_f16(&bad, hrow, 2), T2PO_STATUS_BAD_FORCED_TOKEN);
  CHECK(row[0] == 0.0f && row[7] == 7.0f && hrow[0] == 0x3F80);
}

/* Explained validation: the message names the field. */
static void explain(void) {
  t2po_config cfg;
  char msg[160];
  EXPECT_STATUS(t2po_config_default(T2PO_PROFILE_RELEASED, &cfg), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_config_explain(&cfg, msg, sizeof msg), T2PO_STATUS_OK);
  CHECK(strcmp(msg, "ok") == 0);
  cfg.alpha = 1.5f;
  EXPECT_STATUS(t2po_config_explain(&cfg, msg, sizeof msg), T2PO_STATUS_BAD_ALPHA);
  CHECK(strncmp(msg, "alpha = 1.5", 11) == 0);
  cfg.alpha = 0.4f;
  cfg.eta = -1.0f;
  EXPECT_STATUS(t2po_config_explain(&cfg, msg, sizeof msg), T2PO_STATUS_BAD_TOLERANCE);
  CHECK(strncmp(msg, "eta = -1", 8) == 0);
  /* Truncated to the buffer, always NUL-terminated; a zero capacity is a size error. */
  char small[6];
  memset(small, 'x', sizeof small);
  EXPECT_STATUS(t2po_config_explain(&cfg, small, sizeof small), T2PO_STATUS_BAD_TOLERANCE);
  CHECK(strcmp(small, "eta =") == 0);
  EXPECT_STATUS(t2po_config_explain(&cfg, small, 0), T2PO_STATUS_BAD_SIZE);
  EXPECT_STATUS(t2po_config_explain(NULL, msg, sizeof msg), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_config_explain(&cfg, NULL, sizeof msg), T2PO_STATUS_NULL_POINTER);
}

/* TDS counters, and Φ from a corrupted accumulator. */
static void counters_and_corruption(void) {
  t2po_config cfg;
  EXPECT_STATUS(t2po_config_default(T2PO_PROFILE_PAPER, &cfg), T2PO_STATUS_OK);
  t2po_tds tds;
  t2po_tds_verdict v;
  t2po_tds_counters c;
  EXPECT_STATUS(t2po_tds_init(&tds, &cfg), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_tds_get_counters(&tds, &c), T2PO_STATUS_OK);
  CHECK(c.turns == 0 && c.resamples == 0 && c.tries == 0);
  EXPECT_STATUS(t2po_tds_decide(&tds, 0.5f, &v), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_tds_commit(&tds), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_tds_decide(&tds, 0.52f, &v), T2PO_STATUS_OK);
  CHECK(v.resample == 1);
  EXPECT_STATUS(t2po_tds_get_counters(&tds, &c), T2PO_STATUS_OK);
  CHECK(c.turns == 1 && c.resamples == 0 && c.tries == 1);
  EXPECT_STATUS(t2po_tds_decide(&tds, 0.9f, &v), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_tds_commit(&tds), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_tds_get_counters(&tds, &c), T2PO_STATUS_OK);
  CHECK(c.turns == 2 && c.resamples == 1 && c.tries == 0);
  EXPECT_STATUS(t2po_tds_get_counters(&tds, NULL), T2PO_STATUS_NULL_POINTER);
  EXPECT_STATUS(t2po_tds_get_counters(NULL, &c), T2PO_STATUS_NULL_POINTER);

  /* Corrupt the turn accumulator of a valid state (the magic intact), as a caller writing
   * through the header's private fields could: Φ is an error, not a NaN with status 0. */
  t2po_seq seq;
  float row[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  t2po_step step;
  float phi;
  EXPECT_STATUS(t2po_seq_init(&seq, &cfg), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_OUTSIDE), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_accept(&seq, 5), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_OK);
  CHECK(isfinite(phi));
  t2po_seq good = seq;
  seq.turn.mantissa = NAN;
  phi = 123.0f;
  EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_BAD_ACCUMULATOR);
  CHECK(phi == 123.0f);
  seq = good;
  seq.turn.exponent = INT64_MAX / 2; /* Φ = exp(huge) = inf */
  EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_BAD_ACCUMULATOR);

  /* What an outside check found: a poisoned accumulator gave the error once, then one more
   * token renormalised the NaN/inf mantissa and Φ came back OK (≈ 2.2e8); an exponent of
   * INT64_MIN gave OK with Φ = 0. Each stays an error through more tokens, until a reset. */
  const double bad_mantissa[3] = {NAN, INFINITY, -INFINITY};
  const int64_t bad_exponent[2] = {INT64_MIN, INT64_MAX};
  for (int k = 0; k < 5; k++) {
    seq = good;
    if (k < 3) {
      seq.turn.mantissa = bad_mantissa[k];
    } else {
      seq.turn.exponent = bad_exponent[k - 3];
    }
    for (int token = 0; token < 4; token++) {
      phi = 123.0f;
      EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_BAD_ACCUMULATOR);
      CHECK(phi == 123.0f);
      EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
      EXPECT_STATUS(t2po_seq_accept(&seq, 5), T2PO_STATUS_OK);
    }
    EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_BAD_ACCUMULATOR);
    /* A new generation starts from a fresh accumulator. */
    EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_OUTSIDE), T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_EMPTY_TURN);
    EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_accept(&seq, 5), T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_OK);
    CHECK(isfinite(phi));
  }
  /* Released profile: the arithmetic sum. */
  EXPECT_STATUS(t2po_config_default(T2PO_PROFILE_RELEASED, &cfg), T2PO_STATUS_OK);
  EXPECT_STATUS(t2po_seq_init(&seq, &cfg), T2PO_STATUS_OK);
  seq.turn.count_after_skip = 3;
  seq.turn.sum = INFINITY;
  phi = 123.0f;
  EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_BAD_ACCUMULATOR);
  CHECK(phi == 123.0f);
  /* ... and stays so through tokens past the skip. */
  EXPECT_STATUS(t2po_seq_begin_generation(&seq, T2PO_THINK_START_OUTSIDE), T2PO_STATUS_OK);
  seq.turn.count_after_skip = 3;
  seq.turn.sum = NAN;
  for (int token = 0; token < 40; token++) {
    EXPECT_STATUS(t2po_seq_observe_f32(&seq, row, 8, &step), T2PO_STATUS_OK);
    EXPECT_STATUS(t2po_seq_accept(&seq, 5), T2PO_STATUS_OK);
  }
  EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_BAD_ACCUMULATOR);
  CHECK(phi == 123.0f);
  phi = 123.0f;
  EXPECT_STATUS(t2po_seq_turn_signal(&seq, &phi), T2PO_STATUS_BAD_ACCUMULATOR);
  CHECK(phi == 123.0f);
}

int main(void) {
  layout_and_version();
  prompt_and_events();
  explain();
  counters_and_corruption();
  full_loops();
  batched();
  batched_stats();
  stats_mass();
  batched_mass();
  tds_turns();
  error_paths();
  if (failures) {
    fprintf(stderr, "c abi: %d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("c abi: %d checks passed\n", checks);
  return 0;
}
