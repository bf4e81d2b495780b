//! The one per-token caller of the control kernel. Each decode step, in the spec's order:
//! the **raw** logits of every active row go through `t2po_control::observe_batch` (statistics,
//! `M_t`, the TTI decision); a forced step replaces sampling; otherwise temperature / top-p
//! sampling draws one token from the row's own generator; then `accept(token)`.

use rand::Rng;
use rand_chacha::ChaCha12Rng;
use rayon::prelude::*;
use t2po_control::{observe_batch, Event, Sequence, Step};

use crate::error::{Error, Result};

/// Fewest rows per parallel `observe_batch` call (below it, one call: the split costs more).
const OBSERVE_CHUNK: usize = 8;

/// Temperature and nucleus sampling.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    /// Softmax temperature (> 0).
    pub temperature: f32,
    /// Nucleus mass in `(0, 1]`; 1 samples from the whole distribution.
    pub top_p: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
        }
    }
}

impl SamplingParams {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature > 0.0) {
            return Err(Error::invalid(
                "temperature",
                format!("{}: must be a positive number", self.temperature),
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::invalid(
                "top_p",
                format!("{}: must be in (0, 1]", self.top_p),
            ));
        }
        Ok(())
    }
}

/// What happened at one row's decode step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Draw {
    /// The emitted token.
    pub token: u32,
    /// `log p(token)` under the model's distribution at the sampling temperature (forced
    /// tokens included: they are trained like sampled ones).
    pub log_prob: f32,
    /// Whether TTI forced this token.
    pub forced: bool,
    /// `M_t` of this position (`None` on forced positions, which have no signal).
    pub signal: Option<f32>,
    /// Whether TTI fired at this step, and why (its queue starts at the next step).
    pub event: Event,
}

/// Reusable buffers of the sampling step.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    steps: Vec<Step>,
    probs: Vec<f32>,
    order: Vec<u32>,
}

impl Sampler {
    /// A sampler with checked parameters.
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        Ok(Self {
            params,
            steps: Vec::new(),
            probs: Vec::new(),
            order: Vec::new(),
        })
    }

    /// One decode step for every row: `logits` is `[B, vocab]` row-major raw logits,
    /// `seqs`/`rngs`/`out` have one entry per row.
    pub fn step(
        &mut self,
        seqs: &mut [Sequence],
        rngs: &mut [ChaCha12Rng],
        logits: &[f32],
        vocab: usize,
        out: &mut Vec<Draw>,
    ) -> Result<()> {
        let b = seqs.len();
        if rngs.len() != b || logits.len() != b * vocab {
            return Err(Error::invalid(
                "sampler",
                format!(
                    "{b} sequences, {} generators, {} logits for vocab {vocab}",
                    rngs.len(),
                    logits.len()
                ),
            ));
        }
        self.steps.resize(b, Step::default());
        // The kernel's rows are independent, so splitting them over the pool (each chunk one
        // `observe_batch` call) changes nothing in the results, only the wall time.
        let per = OBSERVE_CHUNK.max(b.div_ceil(rayon::current_num_threads().max(1)));
        seqs.par_chunks_mut(per)
            .zip(logits.par_chunks(per * vocab))
            .zip(self.steps.par_chunks_mut(per))
            .try_for_each(|((s, l), st)| observe_batch(s, l, vocab, vocab, st))?;
        out.clear();
        for r in 0..b {
            let row = &logits[r * vocab..(r + 1) * vocab];
            let step = self.steps[r];
            let forced = step.forced();
            let (token, log_prob) = match forced {
                Some(t) => {
                    if t as usize >= vocab {
                        return Err(Error::invalid(
                            "forced token",
                            format!("{t} is outside the vocabulary ({vocab})"),
                        ));
                    }
                    (t, self.log_prob(row, t))
                }
                None => self.draw(row, &mut rngs[r]),
            };
            seqs[r].accept(token)?;
            let event = match step.event {
                1 => Event::Converged,
                2 => Event::Budget,
                _ => Event::None,
            };
            out.push(Draw {
                token,
                log_prob,
                forced: forced.is_some(),
                signal: forced.is_none().then_some(step.signal),
                event,
            });
        }
        Ok(())
    }

    /// Sampling alone, without the control kernel (the baseline of the overhead benchmark).
    pub fn sample_only(
        &mut self,
        rngs: &mut [ChaCha12Rng],
        logits: &[f32],
        vocab: usize,
        out: &mut Vec<Draw>,
    ) -> Result<()> {
        if logits.len() != rngs.len() * vocab {
            return Err(Error::invalid("sampler", "one generator per logits row"));
        }
        out.clear();
        for (r, rng) in rngs.iter_mut().enumerate() {
            let (token, log_prob) = self.draw(&logits[r * vocab..(r + 1) * vocab], rng);
            out.push(Draw {
                token,
                log_prob,
                forced: false,
                signal: None,
                event: Event::None,
            });
        }
        Ok(())
    }

    /// `log softmax(row / T)[token]`.
    fn log_prob(&self, row: &[f32], token: u32) -> f32 {
        let inv_t = 1.0 / self.params.temperature;
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = row
            .iter()
            .map(|&x| (((x - max) * inv_t) as f64).exp())
            .sum();
        ((row[token as usize] - max) * inv_t) - sum.ln() as f32
    }

    /// One draw from `softmax(row / T)` restricted to the top-p nucleus, with its log-prob
    /// under the full tempered distribution.
    fn draw(&mut self, row: &[f32], rng: &mut ChaCha12Rng) -> (u32, f32) {
        let inv_t = 1.0 / self.params.temperature;
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        self.probs.clear();
        self.probs
            .extend(row.iter().map(|&x| ((x - max) * inv_t).exp()));
        let total: f64 = self.probs.iter().map(|&p| p as f64).sum();
        let u: f64 = rng.random::<f64>();
        let token = if self.params.top_p >= 1.0 {
            let target = u * total;
            let mut acc = 0.0f64;
            let mut pick = None;
            for (i, &p) in self.probs.iter().enumerate() {
                acc += p as f64;
                if acc > target && p > 0.0 {
                    pick = Some(i);
                    break;
                }
            }
            // Rounding can leave `acc` a hair below `target`: take the last non-zero entry.
            pick.unwrap_or_else(|| self.probs.iter().rposition(|&p| p > 0.0).unwrap_or(0))
        } else {
            self.order.clear();
            self.order.extend(0..row.len() as u32);
            let probs = &self.probs;
            self.order.sort_unstable_by(|&a, &b| {
                probs[b as usize]
                    .total_cmp(&probs[a as usize])
                    .then(a.cmp(&b))
            });
            let cut = self.params.top_p as f64 * total;
            let mut mass = 0.0f64;
            let mut keep = 0;
            for &i in &self.order {
                mass += probs[i as usize] as f64;
                keep += 1;
                if mass >= cut {
                    break;
                }
            }
            let target = u * mass;
            let mut acc = 0.0f64;
            let mut pick = self.order[keep - 1] as usize;
            for &i in &self.order[..keep] {
                acc += probs[i as usize] as f64;
                if acc > target {
                    pick = i as usize;
                    break;
                }
            }
            pick
        };
        let log_prob = ((row[token] - max) * inv_t) - total.ln() as f32;
        (token as u32, log_prob)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn softmax64(row: &[f32], t: f64) -> Vec<f64> {
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x as f64));
        let e: Vec<f64> = row.iter().map(|&x| ((x as f64 - m) / t).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    }

    #[test]
    fn draws_follow_the_tempered_distribution() {
        let row = [0.5f32, 2.0, -1.0, 1.0, f32::NEG_INFINITY, 0.0];
        for t in [0.5f32, 1.0, 2.0] {
            let mut s = Sampler::new(SamplingParams {
                temperature: t,
                top_p: 1.0,
            })
            .unwrap();
            let mut rng = ChaCha12Rng::seed_from_u64(3);
            let n = 60_000;
            let mut counts = [0usize; 6];
            for _ in 0..n {
                let (tok, lp) = s.draw(&row, &mut rng);
                counts[tok as usize] += 1;
                // Log-prob against an f64 reference: 1e-5 absolute.
                let want = softmax64(&row, t as f64)[tok as usize].ln();
                assert!((lp as f64 - want).abs() < 1e-5, "{lp} vs {want}");
            }
            assert_eq!(counts[4], 0, "a -inf logit was drawn");
            let p = softmax64(&row, t as f64);
            for (i, &c) in counts.iter().enumerate() {
                // 5 standard deviations of a binomial count.
                let sd = (n as f64 * p[i] * (1.0 - p[i])).sqrt();
                assert!(
                    (c as f64 - n as f64 * p[i]).abs() <= 5.0 * sd + 1.0,
                    "T {t}, token {i}: {c} draws, expected {}",
                    n as f64 * p[i]
                );
            }
        }
    }

    #[test]
    fn top_p_keeps_the_smallest_nucleus() {
        // Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps tokens {0, 1}.
        let row: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_p: 0.75,
        })
        .unwrap();
        let mut rng = ChaCha12Rng::seed_from_u64(9);
        let mut counts = [0usize; 4];
        for _ in 0..20_000 {
            counts[s.draw(&row, &mut rng).0 as usize] += 1;
        }
        assert_eq!(counts[2] + counts[3], 0);
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((ratio - 5.0 / 3.0).abs() < 0.1, "{counts:?}");
    }

    #[test]
    fn bad_parameters_are_named() {
        let e = Sampler::new(SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
        })
        .unwrap_err();
        assert!(e.to_string().contains("temperature"));
        let e = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_p: 1.5,
        })
        .unwrap_err();
        assert!(e.to_string().contains("top_p"));
    }

    #[test]
    fn forced_steps_replace_sampling_and_are_accepted() {
        let mut cfg = t2po_control::Config::paper();
        cfg.think_open = 1;
        cfg.think_close = 2;
        cfg.queue_len = 2;
        cfg.queue[..2].copy_from_slice(&[2, 3]);
        cfg.min_len = 4;
        cfg.max_think = 6;
        let mut seqs = vec![t2po_control::Sequence::new(&cfg).unwrap()];
        seqs[0].reset();
        seqs[0].begin_generation(t2po_control::ThinkStart::Inside);
        let mut rngs = vec![ChaCha12Rng::seed_from_u64(1)];
        let mut s = Sampler::new(SamplingParams::default()).unwrap();
        // Token 5 always wins by far: the model never closes the think block itself.
        let mut row = vec![0.0f32; 8];
        row[5] = 30.0;
        let mut out = Vec::new();
        let mut emitted = Vec::new();
        for _ in 0..9 {
            s.step(&mut seqs, &mut rngs, &row, 8, &mut out).unwrap();
            emitted.push((out[0].token, out[0].forced, out[0].event));
        }
        // The budget L_max = 6 fires at the 6th think token; the queue follows in order.
        let tokens: Vec<u32> = emitted.iter().map(|e| e.0).collect();
        assert_eq!(&tokens[..8], &[5, 5, 5, 5, 5, 5, 2, 3]);
        assert!(emitted[6].1 && emitted[7].1 && !emitted[5].1);
        assert!(emitted.iter().filter(|e| e.2 != Event::None).count() == 1);
        assert!(seqs[0].fired().is_some());
    }
}
