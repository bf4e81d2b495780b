//! AdamW (decoupled weight decay, as `torch.optim.AdamW`) with gradient accumulation over
//! micro-batches, clipping by the global gradient norm, and a linear warm-up — with its state
//! (moments, step count) exposed by name so a checkpoint can save it and a resume continue
//! bit for bit. candle's own `AdamW` keeps that state private, hence this file.

use std::collections::{BTreeMap, HashMap};

use candle_core::backprop::GradStore;
use candle_core::{bail, CpuStorage, DType, Device, InplaceOp2, InplaceOp3, Layout, Tensor, Var};

use crate::error::{Error, Result};

/// AdamW's hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamWConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Denominator ε.
    pub eps: f64,
    /// Decoupled weight decay (spec §5: 0.01).
    pub weight_decay: f64,
    /// Clip the global gradient norm to this (spec §5: 1.0); 0 turns clipping off.
    pub grad_clip: f64,
    /// Steps of linear warm-up from 0 to `lr`.
    pub warmup_steps: u64,
    /// Steps of cosine decay from `lr` to `final_lr` after the warm-up (0: constant `lr`).
    pub decay_steps: u64,
    /// The rate the cosine decay ends at (and stays at after it).
    pub final_lr: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            grad_clip: 1.0,
            warmup_steps: 0,
            decay_steps: 0,
            final_lr: 0.0,
        }
    }
}

impl AdamWConfig {
    /// Checks every field; the error names it.
    pub fn validate(&self) -> Result<()> {
        let check = |name: &str, ok: bool, want: &str, v: f64| {
            if ok {
                Ok(())
            } else {
                Err(Error::invalid(
                    format!("optimizer.{name}"),
                    format!("{v}: {want}"),
                ))
            }
        };
        check(
            "lr",
            self.lr.is_finite() && self.lr > 0.0,
            "must be > 0",
            self.lr,
        )?;
        check(
            "beta1",
            (0.0..1.0).contains(&self.beta1),
            "must be in [0, 1)",
            self.beta1,
        )?;
        check(
            "beta2",
            (0.0..1.0).contains(&self.beta2),
            "must be in [0, 1)",
            self.beta2,
        )?;
        check(
            "eps",
            self.eps.is_finite() && self.eps > 0.0,
            "must be > 0",
            self.eps,
        )?;
        check(
            "weight_decay",
            self.weight_decay.is_finite() && self.weight_decay >= 0.0,
            "must be ≥ 0",
            self.weight_decay,
        )?;
        check(
            "grad_clip",
            self.grad_clip.is_finite() && self.grad_clip >= 0.0,
            "must be ≥ 0 (0 = off)",
            self.grad_clip,
        )?;
        check(
            "final_lr",
            self.decay_steps == 0
                || (self.final_lr.is_finite() && self.final_lr >= 0.0 && self.final_lr <= self.lr),
            "must be in [0, lr] when decay_steps > 0",
            self.final_lr,
        )
    }

    /// The learning rate at optimizer step `step` (0-based): linear warm-up to `lr` over
    /// `warmup_steps`, then a half cosine from `lr` to `final_lr` over `decay_steps` (the
    /// schedule of `transformers`' `get_cosine_schedule_with_warmup` with a floor), then
    /// `final_lr`; constant `lr` after the warm-up when `decay_steps` is 0.
    pub fn lr_at(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        if self.decay_steps == 0 {
            return self.lr;
        }
        let t = (step - self.warmup_steps) as f64 / self.decay_steps as f64;
        if t >= 1.0 {
            return self.final_lr;
        }
        let cos = 0.5 * (1.0 + (std::f64::consts::PI * t).cos());
        self.final_lr + (self.lr - self.final_lr) * cos
    }
}

/// Gradients summed over micro-batches, by parameter name.
#[derive(Debug, Default)]
pub struct Accumulated {
    grads: BTreeMap<String, Tensor>,
}

impl Accumulated {
    /// Adds one backward pass's gradients of `params`.
    pub fn add(&mut self, params: &BTreeMap<String, Var>, grads: &GradStore) -> Result<()> {
        for (name, var) in params {
            if let Some(g) = grads.get(var.as_tensor()) {
                let g = g.detach();
                let sum = match self.grads.remove(name) {
                    Some(prev) => (prev + g)?,
                    None => g,
                };
                self.grads.insert(name.clone(), sum);
            }
        }
        Ok(())
    }

    /// The global L2 norm of the accumulated gradients.
    pub fn norm(&self) -> Result<f64> {
        let mut sq = 0.0f64;
        for g in self.grads.values() {
            sq += match host_f32(g)? {
                // One pass over the host data, squares summed in f64 (what the composed path
                // below computes, without its f64 copy and three tensor ops).
                Some(x) => x.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>(),
                None => g
                    .to_dtype(DType::F64)?
                    .sqr()?
                    .sum_all()?
                    .to_scalar::<f64>()?,
            };
        }
        Ok(sq.sqrt())
    }
}

/// The f32 data of a contiguous CPU tensor (None for other dtypes, devices or layouts).
fn host_f32(t: &Tensor) -> Result<Option<Vec<f32>>> {
    if !fusable(t) {
        return Ok(None);
    }
    Ok(Some(t.flatten_all()?.to_vec1::<f32>()?))
}

/// Whether the fused in-place update applies: an f32 contiguous CPU tensor.
fn fusable(t: &Tensor) -> bool {
    t.dtype() == DType::F32 && t.device().is_cpu() && t.is_contiguous()
}

/// The scalars of one AdamW step, in f32 as the composed ops apply them (candle's `affine`
/// computes `x·mul + add` in the tensor's dtype).
#[derive(Clone, Copy, Debug)]
struct AdamFused {
    scale: f32,
    b1: f32,
    nb1: f32,
    b2: f32,
    nb2: f32,
    c1: f32,
    c2: f32,
    eps: f32,
    decay: f32,
    lr: f32,
}

fn slice_mut<'a>(
    s: &'a mut CpuStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<&'a mut [f32]> {
    let CpuStorage::F32(v) = s else {
        bail!("adamw: {what} must be f32")
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&mut v[a..b]),
        None => bail!("adamw: {what} must be contiguous"),
    }
}

fn slice<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(v) = s else {
        bail!("adamw: {what} must be f32")
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&v[a..b]),
        None => bail!("adamw: {what} must be contiguous"),
    }
}

/// `m ← m·β₁ + g·(1 − β₁)` (or `v ← v·β₂ + g²·(1 − β₂)`), in place; on the first step the
/// moment is just the new term, as the composed path starts it.
struct AdamMoment {
    f: AdamFused,
    first: bool,
    second: bool,
}

impl InplaceOp2 for AdamMoment {
    fn name(&self) -> &'static str {
        "t2po-adamw-moment"
    }
    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        let m = slice_mut(s1, l1, "moment")?;
        let g = slice(s2, l2, "gradient")?;
        if m.len() != g.len() {
            bail!(
                "adamw: moment of {} values, gradient of {}",
                m.len(),
                g.len()
            );
        }
        let f = self.f;
        let (beta, keep) = if self.second {
            (f.b2, f.nb2)
        } else {
            (f.b1, f.nb1)
        };
        for (m, &g) in m.iter_mut().zip(g) {
            let g = if f.scale != 1.0 { g * f.scale + 0.0 } else { g };
            let term = if self.second { g * g } else { g } * keep + 0.0;
            *m = if self.first {
                term
            } else {
                (*m * beta + 0.0) + term
            };
        }
        Ok(())
    }
}

/// `θ ← θ·(1 − lr·wd) − lr·(m·c₁)/(√(v·c₂) + ε)`, in place.
struct AdamApply {
    f: AdamFused,
}

impl InplaceOp3 for AdamApply {
    fn name(&self) -> &'static str {
        "t2po-adamw-apply"
    }
    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<()> {
        let theta = slice_mut(s1, l1, "parameter")?;
        let (m, v) = (slice(s2, l2, "m")?, slice(s3, l3, "v")?);
        if theta.len() != m.len() || theta.len() != v.len() {
            bail!("adamw: parameter, m and v of different sizes");
        }
        let f = self.f;
        for ((t, &m), &v) in theta.iter_mut().zip(m).zip(v) {
            let update = (m * f.c1 + 0.0) / ((v * f.c2 + 0.0).sqrt() + f.eps);
            *t = (*t * f.decay + 0.0) - (update * f.lr + 0.0);
        }
        Ok(())
    }
}

/// What one optimizer step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// The global gradient norm before clipping.
    pub grad_norm: f64,
    /// The learning rate used.
    pub lr: f64,
}

/// AdamW over named parameters.
#[derive(Debug)]
pub struct AdamW {
    cfg: AdamWConfig,
    step: u64,
    m: BTreeMap<String, Tensor>,
    v: BTreeMap<String, Tensor>,
    /// Always take the composed tensor-op update (the tested reference for the fused one).
    composed: bool,
}

impl AdamW {
    /// A fresh optimizer.
    pub fn new(cfg: AdamWConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            step: 0,
            m: BTreeMap::new(),
            v: BTreeMap::new(),
            composed: false,
        })
    }

    /// Optimizer steps taken.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The config.
    pub fn config(&self) -> &AdamWConfig {
        &self.cfg
    }

    /// One update of `params` with the accumulated gradients: clip to `grad_clip` by the
    /// global norm, then `θ ← θ·(1 − lr·wd) − lr·m̂/(√v̂ + ε)`. A non-finite gradient norm is an
    /// error and changes nothing.
    pub fn step(
        &mut self,
        params: &BTreeMap<String, Var>,
        grads: &Accumulated,
    ) -> Result<StepReport> {
        let norm = grads.norm()?;
        if !norm.is_finite() {
            return Err(Error::invalid(
                "gradients",
                format!("the global norm is {norm}: the step was skipped"),
            ));
        }
        let scale = if self.cfg.grad_clip > 0.0 && norm > self.cfg.grad_clip {
            self.cfg.grad_clip / (norm + 1e-6)
        } else {
            1.0
        };
        let lr = self.cfg.lr_at(self.step);
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        let (c1, c2) = (1.0 / (1.0 - b1.powi(t)), 1.0 / (1.0 - b2.powi(t)));
        let fused = AdamFused {
            scale: scale as f32,
            b1: b1 as f32,
            nb1: (1.0 - b1) as f32,
            b2: b2 as f32,
            nb2: (1.0 - b2) as f32,
            c1: c1 as f32,
            c2: c2 as f32,
            eps: self.cfg.eps as f32,
            decay: (1.0 - lr * self.cfg.weight_decay) as f32,
            lr: lr as f32,
        };
        for (name, var) in params {
            let Some(g) = grads.grads.get(name) else {
                continue;
            };
            if !self.composed && fusable(var.as_tensor()) && fusable(g) {
                // In place on the host data, the same f32 operations in the same order as the
                // composed update below (bit for bit; tested), without its dozen tensor ops.
                let zeros = || Tensor::zeros(var.shape(), DType::F32, &Device::Cpu);
                let m = match self.m.get(name) {
                    Some(m) if fusable(m) => m.clone(),
                    _ => zeros()?,
                };
                let v = match self.v.get(name) {
                    Some(v) if fusable(v) => v.clone(),
                    _ => zeros()?,
                };
                let first = !self.m.contains_key(name);
                m.inplace_op2(
                    g,
                    &AdamMoment {
                        f: fused,
                        first,
                        second: false,
                    },
                )?;
                v.inplace_op2(
                    g,
                    &AdamMoment {
                        f: fused,
                        first,
                        second: true,
                    },
                )?;
                var.as_tensor()
                    .inplace_op3(&m, &v, &AdamApply { f: fused })?;
                self.m.insert(name.clone(), m);
                self.v.insert(name.clone(), v);
                continue;
            }
            let g = if scale != 1.0 {
                (g * scale)?
            } else {
                g.clone()
            };
            let m = match self.m.get(name) {
                Some(m) => ((m * b1)? + (&g * (1.0 - b1))?)?,
                None => (&g * (1.0 - b1))?,
            };
            let v = match self.v.get(name) {
                Some(v) => ((v * b2)? + (g.sqr()? * (1.0 - b2))?)?,
                None => (g.sqr()? * (1.0 - b2))?,
            };
            let update = ((&m * c1)? / (((&v * c2)?.sqrt()? + self.cfg.eps)?))?;
            let theta = (var.as_tensor() * (1.0 - lr * self.cfg.weight_decay))?;
            var.set(&(theta - (update * lr)?)?)?;
            self.m.insert(name.clone(), m);
            self.v.insert(name.clone(), v);
        }
        Ok(StepReport {
            grad_norm: norm,
            lr,
        })
    }

    /// The state as named tensors (`m.<param>`, `v.<param>`) plus the step count, for a
    /// checkpoint.
    pub fn state(&self) -> (HashMap<String, Tensor>, u64) {
        let mut out = HashMap::new();
        for (k, t) in &self.m {
            out.insert(format!("m.{k}"), t.clone());
        }
        for (k, t) in &self.v {
            out.insert(format!("v.{k}"), t.clone());
        }
        (out, self.step)
    }

    /// [`state`](Self::state) as a copy that later steps leave alone (they update the moments
    /// in place): what [`load_state`](Self::load_state) restores to undo them.
    pub fn snapshot(&self) -> Result<(HashMap<String, Tensor>, u64)> {
        let (moments, step) = self.state();
        let copied = moments
            .into_iter()
            .map(|(k, t)| Ok((k, t.copy()?)))
            .collect::<Result<HashMap<_, _>>>()?;
        Ok((copied, step))
    }

    /// Restores [`state`](Self::state); a tensor whose name or shape does not fit `params` is
    /// an error naming it.
    pub fn load_state(
        &mut self,
        params: &BTreeMap<String, Var>,
        tensors: HashMap<String, Tensor>,
        step: u64,
    ) -> Result<()> {
        let mut m = BTreeMap::new();
        let mut v = BTreeMap::new();
        for (key, t) in tensors {
            let (kind, name) = key.split_once('.').unwrap_or(("", &key));
            let Some(var) = params.get(name) else {
                return Err(Error::invalid(
                    "optimizer state",
                    format!("tensor `{key}` belongs to no parameter of this model"),
                ));
            };
            if t.dims() != var.dims() {
                return Err(Error::invalid(
                    "optimizer state",
                    format!(
                        "tensor `{key}` has shape {:?}, the parameter {:?}",
                        t.dims(),
                        var.dims()
                    ),
                ));
            }
            let t = t.to_dtype(var.dtype())?.to_device(var.device())?;
            match kind {
                "m" => m.insert(name.to_string(), t),
                "v" => v.insert(name.to_string(), t),
                _ => {
                    return Err(Error::invalid(
                        "optimizer state",
                        format!("tensor `{key}` is neither m.* nor v.*"),
                    ))
                }
            };
        }
        self.m = m;
        self.v = v;
        self.step = step;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};
    use candle_nn::Optimizer;

    fn params() -> BTreeMap<String, Var> {
        let d = Device::Cpu;
        let mut p = BTreeMap::new();
        p.insert(
            "a".to_string(),
            Var::from_tensor(&Tensor::new(&[0.5f64, -1.0, 2.0], &d).unwrap()).unwrap(),
        );
        p.insert(
            "b".to_string(),
            Var::from_tensor(&Tensor::new(&[[1.0f64, 0.25], [-0.5, 3.0]], &d).unwrap()).unwrap(),
        );
        p
    }

    fn loss(p: &BTreeMap<String, Var>) -> Tensor {
        let a = p["a"].as_tensor();
        let b = p["b"].as_tensor();
        ((a.sqr().unwrap().sum_all().unwrap() * 3.0).unwrap()
            + (b.sum_all().unwrap().sqr().unwrap()))
        .unwrap()
    }

    #[test]
    fn matches_candle_adamw_without_clipping() {
        // Reference: candle_nn::AdamW has the same update rule; 1e-12 in f64.
        let ours_p = params();
        let ref_p = params();
        let cfg = AdamWConfig {
            lr: 0.1,
            grad_clip: 0.0,
            ..AdamWConfig::default()
        };
        let mut ours = AdamW::new(cfg).unwrap();
        let mut reference = candle_nn::AdamW::new(
            ref_p.values().cloned().collect(),
            candle_nn::ParamsAdamW {
                lr: 0.1,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.01,
            },
        )
        .unwrap();
        for _ in 0..4 {
            let mut acc = Accumulated::default();
            acc.add(&ours_p, &loss(&ours_p).backward().unwrap())
                .unwrap();
            ours.step(&ours_p, &acc).unwrap();
            reference.step(&loss(&ref_p).backward().unwrap()).unwrap();
        }
        for (k, v) in &ours_p {
            let a: Vec<f64> = v.flatten_all().unwrap().to_vec1().unwrap();
            let b: Vec<f64> = ref_p[k].flatten_all().unwrap().to_vec1().unwrap();
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() < 1e-12, "{k}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn clips_by_the_global_norm_and_warms_up() {
        let p = params();
        let mut acc = Accumulated::default();
        acc.add(&p, &loss(&p).backward().unwrap()).unwrap();
        // d/da 3·Σa² = 6a = [3, -6, 12]; d/db (Σb)² = 2·Σb = 7.5 each of 4 entries.
        let want = (9.0f64 + 36.0 + 144.0 + 4.0 * 56.25).sqrt();
        assert!((acc.norm().unwrap() - want).abs() < 1e-12);
        let cfg = AdamWConfig {
            lr: 0.1,
            warmup_steps: 4,
            ..AdamWConfig::default()
        };
        assert_eq!(cfg.lr_at(0), 0.025);
        assert_eq!(cfg.lr_at(3), 0.1);
        assert_eq!(cfg.lr_at(10), 0.1);
        // Cosine to a floor after the warm-up: lr at its start, the midpoint halfway, the floor
        // at its end and after (against the closed form in f64).
        let cos = AdamWConfig {
            decay_steps: 10,
            final_lr: 0.01,
            ..cfg
        };
        cos.validate().unwrap();
        assert_eq!(cos.lr_at(3), 0.1);
        assert_eq!(cos.lr_at(4), 0.1);
        assert!((cos.lr_at(9) - 0.055).abs() < 1e-15, "{}", cos.lr_at(9));
        for k in 0..10u64 {
            let want = 0.01 + 0.09 * 0.5 * (1.0 + (std::f64::consts::PI * k as f64 / 10.0).cos());
            assert!((cos.lr_at(4 + k) - want).abs() < 1e-15);
            assert!(cos.lr_at(4 + k + 1) <= cos.lr_at(4 + k));
        }
        assert_eq!(cos.lr_at(14), 0.01);
        assert_eq!(cos.lr_at(1000), 0.01);
        let bad = AdamWConfig {
            final_lr: 0.5,
            ..cos
        };
        assert!(bad.validate().unwrap_err().to_string().contains("final_lr"));
        let mut opt = AdamW::new(cfg).unwrap();
        let r = opt.step(&p, &acc).unwrap();
        assert!((r.grad_norm - want).abs() < 1e-12);
        assert_eq!(r.lr, 0.025);
        // Adam's first step moves every coordinate by ≈ lr·sign(g) (clipping rescales g but
        // m̂/√v̂ is scale-free), plus the decay.
        let a: Vec<f64> = p["a"].as_tensor().to_vec1().unwrap();
        let a0 = [0.5, -1.0, 2.0];
        for (x, x0) in a.iter().zip(a0) {
            let expected = x0 * (1.0 - 0.025 * 0.01) - 0.025 * f64::signum(x0);
            assert!((x - expected).abs() < 1e-6, "{x} vs {expected}");
        }
    }

    #[test]
    fn the_fused_update_is_the_composed_one_bit_for_bit() {
        // f32 parameters on the CPU take the in-place path; the composed tensor-op update is
        // the reference. Several steps, with and without clipping, with weight decay and warm-up.
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(5);
        let d = Device::Cpu;
        let mut make =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-2.0..2.0)).collect() };
        let init: Vec<(String, Vec<f32>, Vec<usize>)> = vec![
            ("a".into(), make(37), vec![37]),
            ("b".into(), make(64 * 3), vec![64, 3]),
        ];
        let grads_at: Vec<Vec<Vec<f32>>> = (0..6)
            .map(|_| init.iter().map(|(_, x, _)| make(x.len())).collect())
            .collect();
        for clip in [0.0, 1.0] {
            let cfg = AdamWConfig {
                lr: 3e-3,
                grad_clip: clip,
                weight_decay: 0.01,
                warmup_steps: 2,
                ..AdamWConfig::default()
            };
            let run = |composed: bool| -> Vec<Vec<f32>> {
                let p: BTreeMap<String, Var> = init
                    .iter()
                    .map(|(k, x, sh)| {
                        let t = Tensor::from_vec(x.clone(), sh.as_slice(), &d).unwrap();
                        (k.clone(), Var::from_tensor(&t).unwrap())
                    })
                    .collect();
                let mut opt = AdamW::new(cfg).unwrap();
                opt.composed = composed;
                for g in &grads_at {
                    let mut acc = Accumulated::default();
                    for ((k, _, sh), gv) in init.iter().zip(g) {
                        let t = Tensor::from_vec(gv.clone(), sh.as_slice(), &d).unwrap();
                        acc.grads.insert(k.clone(), t);
                    }
                    opt.step(&p, &acc).unwrap();
                }
                p.values()
                    .map(|v| {
                        v.as_tensor()
                            .flatten_all()
                            .unwrap()
                            .to_vec1::<f32>()
                            .unwrap()
                    })
                    .collect()
            };
            let (fused, composed) = (run(false), run(true));
            for (a, b) in fused.iter().zip(&composed) {
                let (a, b): (Vec<u32>, Vec<u32>) = (
                    a.iter().map(|x| x.to_bits()).collect(),
                    b.iter().map(|x| x.to_bits()).collect(),
                );
                assert_eq!(a, b, "clip {clip}: fused and composed AdamW differ");
            }
        }
    }

    #[test]
    fn state_round_trips_and_the_next_step_is_identical() {
        let cfg = AdamWConfig {
            lr: 0.05,
            ..AdamWConfig::default()
        };
        let p1 = params();
        let mut o1 = AdamW::new(cfg).unwrap();
        for _ in 0..2 {
            let mut acc = Accumulated::default();
            acc.add(&p1, &loss(&p1).backward().unwrap()).unwrap();
            o1.step(&p1, &acc).unwrap();
        }
        // Resume: copy the parameters and the state into fresh objects.
        let p2 = params();
        for (k, v) in &p2 {
            v.set(p1[k].as_tensor()).unwrap();
        }
        let (state, step) = o1.state();
        let mut o2 = AdamW::new(cfg).unwrap();
        o2.load_state(&p2, state, step).unwrap();
        for (p, o) in [(&p1, &mut o1), (&p2, &mut o2)] {
            let mut acc = Accumulated::default();
            acc.add(p, &loss(p).backward().unwrap()).unwrap();
            o.step(p, &acc).unwrap();
        }
        for (k, v) in &p1 {
            let a: Vec<f64> = v.flatten_all().unwrap().to_vec1().unwrap();
            let b: Vec<f64> = p2[k].flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(a, b);
        }
        // A tensor of the wrong shape is named.
        let bad = HashMap::from([(
            "m.a".to_string(),
            Tensor::zeros(7, DType::F64, &Device::Cpu).unwrap(),
        )]);
        let e = o2.load_state(&p2, bad, 3).unwrap_err();
        assert!(e.to_string().contains("m.a"), "{e}");
    }

    #[test]
    fn bad_settings_are_named() {
        let e = AdamW::new(AdamWConfig {
            beta2: 1.0,
            ..AdamWConfig::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("optimizer.beta2"), "{e}");
    }
}
