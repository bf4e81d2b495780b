// t2po_kernels.cuh: the T²PO control step for a [B, V] logits batch, written once for two
// compilers. NVRTC builds it as CUDA (one block per (row chunk, row), the last block of a row
// finishing it); the host C++ compiler builds the very same functions with the CUDA qualifiers
// stubbed and the per-thread phases run as loops over thread ids, so the normal test suite
// executes the kernel logic on the CPU and compares it with t2po-control.
//
// Per row: a single read of the logits into shared memory (converted from f32/bf16/f16) with a
// per-thread online softmax (running max m, s = Σe^(x−m), t = Σe^(x−m)(x−m)); a block merge of
// the partials; an exact top-j of the chunk by 4-pass radix select on order-preserving keys;
// the row's last block merges the chunk partials and candidates, computes entropy, top-j
// confidence, max and log-sum-exp, then runs the TTI machine on the sequence's device-resident
// `t2po_seq` (the same bytes as t2po-control's `Sequence`): accept of the previous step's token,
// observe (M_t, window, trigger, queue, turn accumulator), and writes the step; on a forced step
// it can override the logits row in place (all −inf but the forced id, which becomes 0).
//
// Requires the t2po.h declarations (t2po_seq, t2po_config, t2po_token_stats, t2po_step) first.

#ifndef T2PO_KERNELS_CUH
#define T2PO_KERNELS_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define T2PO_DEVICE 1
#define T2PO_HD __device__ __forceinline__
#define T2PO_SYNC() __syncthreads()
#define T2PO_THREADS_BEGIN(tid) { const unsigned tid = threadIdx.x;
#define T2PO_THREADS_END } __syncthreads();
#define T2PO_INF __int_as_float(0x7f800000)
#else
#include <math.h>
#include <string.h>
#define T2PO_HD static inline
#define T2PO_SYNC()
#define T2PO_THREADS_BEGIN(tid) for (unsigned tid = 0; tid < T2PO_BLOCK; ++tid) {
#define T2PO_THREADS_END }
#define T2PO_INF INFINITY
#endif

#define T2PO_BLOCK 256u
#define T2PO_MAX_CHUNK 8192u
#define T2PO_J_CAP 64u

// Flag bits of t2po_seq.flags (t2po-control/src/tti.rs).
#define T2PO_F_INSIDE (1u << 0)
#define T2PO_F_PROMPT_INSIDE (1u << 1)
#define T2PO_F_GENERATING (1u << 2)
#define T2PO_F_AWAITING (1u << 3)
#define T2PO_F_FORCED_STEP (1u << 4)
#define T2PO_F_FIRED (1u << 5)
#define T2PO_F_QUEUE (1u << 6)
#define T2PO_F_DONE (1u << 7)

T2PO_HD float t2po_bits_to_float(unsigned u) {
#ifdef T2PO_DEVICE
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

T2PO_HD unsigned t2po_float_to_bits(float f) {
#ifdef T2PO_DEVICE
  return __float_as_uint(f);
#else
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
#endif
}

T2PO_HD double t2po_bits_to_double(unsigned long long u) {
#ifdef T2PO_DEVICE
  return __longlong_as_double((long long)u);
#else
  double d;
  memcpy(&d, &u, 8);
  return d;
#endif
}

T2PO_HD unsigned long long t2po_double_to_bits(double d) {
#ifdef T2PO_DEVICE
  return (unsigned long long)__double_as_longlong(d);
#else
  unsigned long long u;
  memcpy(&u, &d, 8);
  return u;
#endif
}

T2PO_HD int t2po_atomic_add(unsigned* p, unsigned v) {
#ifdef T2PO_DEVICE
  return (int)atomicAdd(p, v);
#else
  unsigned old = *p;
  *p = old + v;
  return (int)old;
#endif
}

// bf16 bits → f32: the top half of an f32.
T2PO_HD float t2po_bf16_to_f32(unsigned short h) { return t2po_bits_to_float(((unsigned)h) << 16); }

// IEEE half bits → f32 (exact; subnormals, inf and NaN included).
T2PO_HD float t2po_f16_to_f32(unsigned short h) {
  unsigned sign = ((unsigned)h & 0x8000u) << 16;
  unsigned exp = ((unsigned)h >> 10) & 0x1fu;
  unsigned man = (unsigned)h & 0x3ffu;
  if (exp == 0x1fu) return t2po_bits_to_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return t2po_bits_to_float(sign);
    // subnormal: value = man · 2^-24
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return t2po_bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// e^d for d in [−87, 0]: Cody–Waite reduction and a degree-5 minimax polynomial (as
// t2po-control's stats.rs; ≤ 4e-7 relative).
T2PO_HD float t2po_exp_neg(float d) {
  const float MAGIC = 12582912.0f;
  float z = d * 1.44269504088896341f + MAGIC;
  float n = z - MAGIC;
  int ni = (int)(t2po_float_to_bits(z) - t2po_float_to_bits(MAGIC));
  float r = d - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 0.008371909f;
  p = p * r + 0.04189468f;
  p = p * r + 0.16666456f;
  p = p * r + 0.49999085f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * t2po_bits_to_float(((unsigned)(ni + 127)) << 23);
}

// A partial softmax over some entries: running max m, s = Σe^(x−m), t = Σe^(x−m)(x−m);
// bad bit 1 = a NaN, bit 2 = a +inf; n = finite entries.
typedef struct {
  float m, s, t;
  unsigned bad, n;
} t2po_partial;

T2PO_HD t2po_partial t2po_partial_empty(void) {
  t2po_partial p;
  p.m = -T2PO_INF;
  p.s = 0.0f;
  p.t = 0.0f;
  p.bad = 0;
  p.n = 0;
  return p;
}

T2PO_HD void t2po_partial_push(t2po_partial* p, float x) {
  if (x != x) {
    p->bad |= 1u;
    return;
  }
  if (x == T2PO_INF) {
    p->bad |= 2u;
    return;
  }
  if (x == -T2PO_INF) return;
  p->n += 1;
  if (x > p->m) {
    if (p->m != -T2PO_INF) {
      float shift = p->m - x;  // < 0
      float sc = shift < -87.0f ? 0.0f : t2po_exp_neg(shift);
      p->t = sc * (p->t + shift * p->s);
      p->s = sc * p->s;
    }
    p->m = x;
    p->s += 1.0f;
    return;
  }
  float d = x - p->m;
  if (d < -87.0f) return;
  float e = t2po_exp_neg(d);
  p->s += e;
  p->t += e * d;
}

T2PO_HD t2po_partial t2po_partial_merge(t2po_partial a, t2po_partial b) {
  t2po_partial r;
  r.bad = a.bad | b.bad;
  r.n = a.n + b.n;
  if (a.m == -T2PO_INF) {
    r.m = b.m;
    r.s = b.s;
    r.t = b.t;
    return r;
  }
  if (b.m == -T2PO_INF) {
    r.m = a.m;
    r.s = a.s;
    r.t = a.t;
    return r;
  }
  float m = a.m > b.m ? a.m : b.m;
  float da = a.m - m, db = b.m - m;
  float ea = da < -87.0f ? 0.0f : t2po_exp_neg(da);
  float eb = db < -87.0f ? 0.0f : t2po_exp_neg(db);
  r.m = m;
  r.s = ea * a.s + eb * b.s;
  r.t = ea * (a.t + da * a.s) + eb * (b.t + db * b.s);
  return r;
}

// Order-preserving key of a float (larger float → larger key).
T2PO_HD unsigned t2po_key(float x) {
  unsigned u = t2po_float_to_bits(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

T2PO_HD float t2po_unkey(unsigned k) {
  return t2po_bits_to_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Shared scratch of one block.
typedef struct {
  t2po_partial part[T2PO_BLOCK];
  unsigned hist[256];
  unsigned prefix, mask, remaining, count, is_last;
} t2po_scratch;

// Block reduction of per-thread partials in sc->part (result in part[0]).
T2PO_HD void t2po_block_reduce_partials(t2po_scratch* sc) {
  for (unsigned stride = T2PO_BLOCK / 2; stride > 0; stride >>= 1) {
    T2PO_THREADS_BEGIN(tid)
    if (tid < stride) sc->part[tid] = t2po_partial_merge(sc->part[tid], sc->part[tid + stride]);
    T2PO_THREADS_END
  }
}

// Exact top-k (k ≤ 64) of the finite values of vals[0..n): MSB-first radix select over 4 bytes
// of the keys, then a gather of the keys above the threshold plus threshold copies. Writes the
// k values (unordered) to out[0..k) and returns k = min(k_want, finite count) in sc->count.
T2PO_HD void t2po_block_topk(const float* vals, unsigned n, unsigned k_want, float* out, t2po_scratch* sc) {
  // Count finite entries into hist[0] (reused below).
  T2PO_THREADS_BEGIN(tid)
  if (tid == 0) {
    sc->count = 0;
    sc->prefix = 0;
    sc->mask = 0;
  }
  T2PO_THREADS_END
  T2PO_THREADS_BEGIN(tid)
  unsigned c = 0;
  for (unsigned i = tid; i < n; i += T2PO_BLOCK) {
    float x = vals[i];
    if (x > -T2PO_INF && x < T2PO_INF) c++;
  }
  if (c) t2po_atomic_add(&sc->count, c);
  T2PO_THREADS_END
  T2PO_THREADS_BEGIN(tid)
  if (tid == 0) {
    unsigned k = sc->count < k_want ? sc->count : k_want;
    sc->remaining = k;
    sc->count = k;
  }
  T2PO_THREADS_END
  for (int shift = 24; shift >= 0; shift -= 8) {
    T2PO_THREADS_BEGIN(tid)
    sc->hist[tid] = 0;  // T2PO_BLOCK == 256 bins
    T2PO_THREADS_END
    T2PO_THREADS_BEGIN(tid)
    if (sc->remaining > 0) {
      for (unsigned i = tid; i < n; i += T2PO_BLOCK) {
        float x = vals[i];
        if (!(x > -T2PO_INF && x < T2PO_INF)) continue;
        unsigned key = t2po_key(x);
        if ((key & sc->mask) == sc->prefix) t2po_atomic_add(&sc->hist[(key >> shift) & 255u], 1u);
      }
    }
    T2PO_THREADS_END
    T2PO_THREADS_BEGIN(tid)
    if (tid == 0 && sc->remaining > 0) {
      unsigned above = 0;
      for (int bin = 255; bin >= 0; --bin) {
        unsigned h = sc->hist[bin];
        if (above + h >= sc->remaining) {
          sc->prefix |= ((unsigned)bin) << shift;
          sc->mask |= 255u << shift;
          sc->remaining -= above;
          break;
        }
        above += h;
      }
    }
    T2PO_THREADS_END
  }
  // Gather: keys above the threshold (exactly count − remaining of them), then copies of it.
  T2PO_THREADS_BEGIN(tid)
  if (tid == 0) sc->hist[0] = 0;
  T2PO_THREADS_END
  T2PO_THREADS_BEGIN(tid)
  if (sc->count > 0) {
    for (unsigned i = tid; i < n; i += T2PO_BLOCK) {
      float x = vals[i];
      if (!(x > -T2PO_INF && x < T2PO_INF)) continue;
      if (t2po_key(x) > sc->prefix) out[t2po_atomic_add(&sc->hist[0], 1u)] = x;
    }
  }
  T2PO_THREADS_END
  T2PO_THREADS_BEGIN(tid)
  if (tid == 0 && sc->count > 0) {
    float thr = t2po_unkey(sc->prefix);
    for (unsigned i = sc->hist[0]; i < sc->count; ++i) out[i] = thr;
  }
  T2PO_THREADS_END
}

// ----------------------------------------------------------------------------------------------
// The TTI machine on t2po_seq, mirroring t2po-control/src/{signal,tti,tds}.rs operation by
// operation (same f32/f64 order, no contraction), so the state evolves bit for bit alike.

T2PO_HD float t2po_clamp01(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

T2PO_HD float t2po_apply_norm(unsigned norm, float x, float mn, float mx, float range_eps, float ln_v) {
  if (norm == 1u) return ln_v > 0.0f ? t2po_clamp01(x / ln_v) : 0.0f;
  if (norm == 2u) return x;
  float range = mx - mn;
  if (range < range_eps || range <= 0.0f) return 0.0f;
  return t2po_clamp01((x - mn) / range);
}

T2PO_HD float t2po_apply_term(unsigned kind, float x) {
  if (kind == 1u) return 1.0f - x;
  if (kind == 2u) return -x;
  return x;
}

T2PO_HD unsigned t2po_sat_inc(unsigned x) { return x == 0xffffffffu ? x : x + 1u; }

T2PO_HD float t2po_signal_update(t2po_signal_state* s, const t2po_config* cfg, const t2po_token_stats* st) {
  float h = st->entropy, c = st->confidence;
  if (s->count == 0) {
    s->h_min = h;
    s->h_max = h;
    s->c_min = c;
    s->c_max = c;
  } else {
    s->h_min = h < s->h_min ? h : s->h_min;
    s->h_max = h > s->h_max ? h : s->h_max;
    s->c_min = c < s->c_min ? c : s->c_min;
    s->c_max = c > s->c_max ? c : s->c_max;
  }
  s->count = t2po_sat_inc(s->count);
  if ((cfg->entropy_norm == 1u || cfg->confidence_norm == 1u) && st->vocab != s->vocab) {
    s->vocab = st->vocab;
    s->ln_vocab = logf((float)st->vocab);
  }
  float th = t2po_apply_term(cfg->entropy_term, t2po_apply_norm(cfg->entropy_norm, h, s->h_min, s->h_max, cfg->range_eps, s->ln_vocab));
  float tc = t2po_apply_term(cfg->confidence_term, t2po_apply_norm(cfg->confidence_norm, c, s->c_min, s->c_max, cfg->range_eps, s->ln_vocab));
  return cfg->alpha * th + (1.0f - cfg->alpha) * tc;
}

T2PO_HD void t2po_turn_push(t2po_turn_accumulator* a, const t2po_config* cfg, unsigned t, float m) {
  if (cfg->turn_mean == 1u) {
    if (t > cfg->phi_skip) {
      a->sum += (double)m;
      a->count_after_skip += 1u;
    }
    return;
  }
  float mf = m > cfg->phi_floor ? m : cfg->phi_floor;  // f32::max: NaN gives the floor
  double x = (double)mf;
  double prod = a->count == 0 ? x : a->mantissa * x;
  const unsigned long long EXP = 0x7ffull << 52;
  unsigned long long bits = t2po_double_to_bits(prod);
  a->exponent += (long long)((bits & EXP) >> 52) - 1023;
  a->mantissa = t2po_bits_to_double((bits & ~EXP) | (1023ull << 52));
  a->count += 1u;
}

T2PO_HD int t2po_window_mean(const t2po_seq* q, float* out) {
  unsigned n = q->config.window + 1u;
  if (q->deltas_seen < n || n > 32u) return 0;
  float sum = 0.0f;
  for (unsigned k = 0; k < n; ++k) sum += q->deltas[(q->head + 32u - 1u - k) % 32u];
  *out = sum / (float)n;
  return 1;
}

// Status values (t2po_status): 0 OK, 34 bad stats, 40 out of order, 41 forced mismatch.
T2PO_HD unsigned t2po_dev_accept(t2po_seq* q, unsigned token) {
  const t2po_config* cfg = &q->config;
  if (!(q->flags & T2PO_F_GENERATING)) {
    if (token == cfg->think_open) q->flags |= T2PO_F_INSIDE | T2PO_F_PROMPT_INSIDE;
    else if (token == cfg->think_close) q->flags &= ~(T2PO_F_INSIDE | T2PO_F_PROMPT_INSIDE);
    return 0;
  }
  if (!(q->flags & T2PO_F_AWAITING)) return 40;
  unsigned forced = q->flags & T2PO_F_FORCED_STEP;
  if (forced) {
    unsigned expected = cfg->queue[q->queue_pos % 8u];
    if (token != expected) return 41;
    q->queue_pos += 1u;
    if (q->queue_pos >= cfg->queue_len) q->flags &= ~T2PO_F_QUEUE;
  }
  q->flags &= ~(T2PO_F_AWAITING | T2PO_F_FORCED_STEP);
  q->generated = t2po_sat_inc(q->generated);
  unsigned inside = q->flags & T2PO_F_INSIDE;
  if (token == cfg->think_open && !inside && !(q->flags & T2PO_F_DONE)) {
    q->flags |= T2PO_F_INSIDE;
  } else if (token == cfg->think_close && inside) {
    q->flags &= ~T2PO_F_INSIDE;
    q->flags |= T2PO_F_DONE;
    if (!forced && q->queue_pos == 0) q->flags &= ~T2PO_F_QUEUE;
  } else if (inside) {
    q->think_len = t2po_sat_inc(q->think_len);
  }
  return 0;
}

T2PO_HD t2po_step t2po_dev_observe(t2po_seq* q, const t2po_token_stats* st) {
  t2po_step step;
  step.forced_token = -1;
  step.event = 0;
  step.signal = 0.0f;
  step.position = q->t;
  step.status = 0;
  const t2po_config* cfg = &q->config;
  if (!(q->flags & T2PO_F_GENERATING) || (q->flags & T2PO_F_AWAITING)) {
    step.status = 40;
    return step;
  }
  if (q->flags & T2PO_F_QUEUE) {
    q->flags |= T2PO_F_AWAITING | T2PO_F_FORCED_STEP;
    step.forced_token = (int)cfg->queue[q->queue_pos % 8u];
    return step;
  }
  float e = st->entropy, c = st->confidence;
  if (!(e - e == 0.0f && c - c == 0.0f && st->vocab > 0)) {
    step.status = 34;
    return step;
  }
  float m = t2po_signal_update(&q->signal, cfg, st);
  q->t = t2po_sat_inc(q->t);
  if (q->t >= 2u) {
    float delta = fabsf(m - q->prev_m);
    q->deltas[q->head % 32u] = delta;
    q->head = (q->head + 1u) % 32u;
    q->deltas_seen = t2po_sat_inc(q->deltas_seen);
    q->calm = delta > cfg->patience_tol ? 0u : t2po_sat_inc(q->calm);
  }
  q->prev_m = m;
  t2po_turn_push(&q->turn, cfg, q->t, m);
  unsigned event = 0;
  if (cfg->tti_enabled != 0u && (q->flags & T2PO_F_INSIDE) && !(q->flags & (T2PO_F_FIRED | T2PO_F_DONE))) {
    int converged = 0;
    if (q->t >= cfg->min_len) {
      if (cfg->trigger == 1u) {
        converged = q->calm >= cfg->patience;
      } else {
        float mean;
        converged = t2po_window_mean(q, &mean) && mean < cfg->epsilon;
      }
    }
    if (converged) event = 1;
    else if (t2po_sat_inc(q->think_len) >= cfg->max_think) event = 2;
    if (event) {
      q->flags |= T2PO_F_FIRED | T2PO_F_QUEUE;
      q->queue_pos = 0;
      q->fire_position = q->t;
      q->fire_event = event;
    }
  }
  q->flags |= T2PO_F_AWAITING;
  step.event = event;
  step.signal = m;
  step.position = q->t;
  return step;
}

// Token statistics from a merged partial and the top-k values (relative to the max, as stats.rs).
// Returns a t2po_status: 0, 31 NaN, 32 +inf, 33 no finite logit, 35 beyond f32.
T2PO_HD unsigned t2po_finish_stats(t2po_partial p, const float* top, unsigned k, unsigned vocab, t2po_token_stats* out) {
  if (p.bad & 1u) return 31;
  if (p.bad & 2u) return 32;
  if (p.m == -T2PO_INF || k == 0) return 33;
  float ln_s = logf(p.s);
  float gap = 0.0f;
  for (unsigned i = 0; i < k; ++i) gap += top[i] - p.m;
  out->entropy = ln_s - p.t / p.s;
  if (out->entropy < 0.0f) out->entropy = 0.0f;
  out->confidence = ln_s - gap / (float)k;
  out->max_logit = p.m;
  out->log_sum_exp = p.m + ln_s;
  out->vocab = vocab;
  out->top_count = k;
  if (!(out->confidence - out->confidence == 0.0f && out->log_sum_exp - out->log_sum_exp == 0.0f)) return 35;
  return 0;
}

// ----------------------------------------------------------------------------------------------
// One block of the control step: chunk `split` of row `b`. Element type by `dtype`: 0 f32,
// 1 bf16, 2 f16. `cand` holds J_CAP floats per (row, split), `cand_n` their counts, `parts` the
// chunk partials, `done` a per-row arrival counter (zeroed again by the row's last block).
// mode bit 0: run the TTI machine; bit 1: override forced rows in place.
T2PO_HD void t2po_control_block(unsigned b, unsigned split, unsigned splits, void* logits, unsigned dtype,
                                unsigned long long row_stride, unsigned vocab, unsigned j, float* vals,
                                t2po_scratch* sc, t2po_partial* parts, float* cand, unsigned* cand_n,
                                unsigned* done, t2po_seq* seqs, const int* prev_tokens, unsigned mode,
                                t2po_token_stats* stats_out, t2po_step* steps_out) {
  unsigned chunk = (vocab + splits - 1u) / splits;
  unsigned c0 = split * chunk;
  unsigned c1 = c0 + chunk < vocab ? c0 + chunk : vocab;
  unsigned n = c1 > c0 ? c1 - c0 : 0u;
  unsigned long long base = (unsigned long long)b * row_stride;
  // Phase 1: one read of the chunk into shared memory, per-thread online softmax.
  T2PO_THREADS_BEGIN(tid)
  t2po_partial p = t2po_partial_empty();
  for (unsigned i = tid; i < n; i += T2PO_BLOCK) {
    unsigned long long at = base + c0 + i;
    float x;
    if (dtype == 0u) x = ((const float*)logits)[at];
    else if (dtype == 1u) x = t2po_bf16_to_f32(((const unsigned short*)logits)[at]);
    else x = t2po_f16_to_f32(((const unsigned short*)logits)[at]);
    vals[i] = x;
    t2po_partial_push(&p, x);
  }
  sc->part[tid] = p;
  T2PO_THREADS_END
  t2po_block_reduce_partials(sc);
  // Phase 2: the chunk's exact top-j.
  float* my_cand = cand + ((unsigned long long)b * splits + split) * T2PO_J_CAP;
  t2po_block_topk(vals, n, j, my_cand, sc);
  T2PO_THREADS_BEGIN(tid)
  if (tid == 0) {
    parts[(unsigned long long)b * splits + split] = sc->part[0];
    cand_n[(unsigned long long)b * splits + split] = sc->count;
#ifdef T2PO_DEVICE
    __threadfence();
#endif
    sc->is_last = (unsigned)t2po_atomic_add(&done[b], 1u) == splits - 1u;
  }
  T2PO_THREADS_END
  if (!sc->is_last) return;
#ifdef T2PO_DEVICE
  __threadfence();
#endif
  // Phase 3 (the row's last block): merge partials and candidates.
  // Other blocks wrote these during this launch: read them through volatile (no stale L1).
  T2PO_THREADS_BEGIN(tid)
  t2po_partial p = t2po_partial_empty();
  for (unsigned s = tid; s < splits; s += T2PO_BLOCK) {
    const volatile t2po_partial* vp = parts + (unsigned long long)b * splits + s;
    t2po_partial q;
    q.m = vp->m;
    q.s = vp->s;
    q.t = vp->t;
    q.bad = vp->bad;
    q.n = vp->n;
    p = t2po_partial_merge(p, q);
  }
  sc->part[tid] = p;
  // Gather every chunk's candidates into vals (splits·64 + 64 ≤ T2PO_MAX_CHUNK, checked by the host).
  for (unsigned s = 0; s < splits; ++s) {
    unsigned cn = ((const volatile unsigned*)cand_n)[(unsigned long long)b * splits + s];
    const volatile float* src = cand + ((unsigned long long)b * splits + s) * T2PO_J_CAP;
    for (unsigned i = tid; i < T2PO_J_CAP; i += T2PO_BLOCK) vals[s * T2PO_J_CAP + i] = i < cn ? src[i] : -T2PO_INF;
  }
  T2PO_THREADS_END
  t2po_block_reduce_partials(sc);
  float* top = vals + splits * T2PO_J_CAP;
  t2po_block_topk(vals, splits * T2PO_J_CAP, j, top, sc);
  T2PO_THREADS_BEGIN(tid)
  if (tid == 0) {
    done[b] = 0;
    t2po_token_stats st;
    st.entropy = 0.0f;
    st.confidence = 0.0f;
    st.max_logit = 0.0f;
    st.log_sum_exp = 0.0f;
    st.vocab = vocab;
    st.top_count = 0;
    unsigned status = t2po_finish_stats(sc->part[0], top, sc->count, vocab, &st);
    stats_out[b] = st;
    t2po_step step;
    step.forced_token = -1;
    step.event = 0;
    step.signal = 0.0f;
    step.position = 0;
    step.status = status;
    if (mode & 1u) {
      t2po_seq* q = &seqs[b];
      unsigned accepted = 0;
      if (prev_tokens[b] >= 0) accepted = t2po_dev_accept(q, (unsigned)prev_tokens[b]);
      if (accepted != 0) {
        step.status = accepted;
      } else if (status == 0 || (q->flags & T2PO_F_QUEUE)) {
        step = t2po_dev_observe(q, &st);
      }
    }
    steps_out[b] = step;
    sc->prefix = step.forced_token >= 0 && (mode & 2u) ? (unsigned)step.forced_token : 0xffffffffu;
  }
  T2PO_THREADS_END
  // Phase 4: in-place override of a forced row.
  if (sc->prefix != 0xffffffffu && sc->prefix < vocab) {
    T2PO_THREADS_BEGIN(tid)
    for (unsigned i = tid; i < vocab; i += T2PO_BLOCK) {
      unsigned long long at = base + i;
      int keep = i == sc->prefix;
      if (dtype == 0u) ((float*)logits)[at] = keep ? 0.0f : -T2PO_INF;
      else if (dtype == 1u) ((unsigned short*)logits)[at] = keep ? 0x0000u : 0xff80u;
      else ((unsigned short*)logits)[at] = keep ? 0x0000u : 0xfc00u;
    }
    T2PO_THREADS_END
  }
}

#endif  // T2PO_KERNELS_CUH
