//! The paper's comparison at small scale: the same RL budget from the same cold-start policy
//! (one per seed) for T²PO, GiGPO (no TTI, no TDS), GRPO (no TTI, no TDS, episode advantage
//! only), T²PO −TTI and T²PO −TDS (the default arms), and on request the baselines and
//! ablations that are switches of the same trainer: a hard thinking budget, SimpleTIR's
//! void-turn filter, `M_t` from entropy alone or confidence alone, and DAPO (dynamic
//! sampling and clip-higher on GRPO), T²PO without the cold start's SFT (−RFT), the
//! length-penalty baseline (Kimi k1.5's length reward on GiGPO), peak-cut (TTI at the first
//! uncertainty peak instead of where `M_t` converged) and T²PO with ε and η calibrated from
//! the policy (`control.calibrate`, beyond the paper); a markdown table of
//! held-out results (mean ± std over seeds) and a chart of held-out success per variant.

use std::path::{Path, PathBuf};

use super::config::TrainConfig;
use super::metrics::{MetricsLog, RolloutSummary};
use super::plots::{write_png, Chart, PlotError, Series};
use super::rft::Reporter;
use super::run::{train, RunOptions};
use crate::algo::Estimator;
use crate::error::{Error, Result};
use crate::rollout::TriggerName;
use candle_core::Device;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// One arm of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// TTI + TDS on GiGPO.
    T2po,
    /// GiGPO without TTI and TDS.
    Gigpo,
    /// GRPO without TTI and TDS.
    Grpo,
    /// T²PO without TTI.
    NoTti,
    /// T²PO without TDS.
    NoTds,
    /// GiGPO whose thinking only the budget L_max cuts (the hard-budget baseline).
    HardBudget,
    /// GiGPO dropping trajectories with a void turn from the loss (SimpleTIR).
    FilterVoid,
    /// T²PO with `M_t` from the entropy alone (α = 1).
    EntropyOnly,
    /// T²PO with `M_t` from the top-j confidence alone (α = 0).
    ConfidenceOnly,
    /// DAPO's recipe on GRPO (no TTI, no TDS): dynamic sampling and clip-higher
    /// (ε_high = 0.28); its token-mean loss is the trainer's loss already.
    Dapo,
    /// T²PO from the policy before the cold start's SFT and rejection round (−RFT): the
    /// pretrained (or `--init`) model goes to RL directly.
    NoRft,
    /// GiGPO (no TTI, no TDS) with Kimi k1.5's length reward on the thinking tokens
    /// (`algo::length`), weight `algo.length_reward` or [`LENGTH_REWARD_WEIGHT`] when it is 0.
    LengthReward,
    /// T²PO whose TTI cuts at the first uncertainty peak (the first local minimum of `M_t`)
    /// instead of where `M_t` converged: the paper's ablation of the trigger rule (§4.2).
    PeakCut,
    /// T²PO with ε and η calibrated from the cold-start policy (`control.calibrate`, beyond
    /// the paper): the config's target fire and resample rates instead of fixed thresholds.
    Calibrated,
}

/// The length-penalty arm's weight when the config's `algo.length_reward` is 0 (a tenth of
/// a Search QA success; the config value takes precedence, e.g. for the environments whose
/// success reward is 10).
pub const LENGTH_REWARD_WEIGHT: f64 = 0.1;

impl Variant {
    /// The arms `ablate` runs unless told otherwise, in table order.
    pub const DEFAULT: [Variant; 5] = [
        Variant::T2po,
        Variant::Gigpo,
        Variant::Grpo,
        Variant::NoTti,
        Variant::NoTds,
    ];

    /// Every arm, in table order.
    pub const ALL: [Variant; 14] = [
        Variant::T2po,
        Variant::Gigpo,
        Variant::Grpo,
        Variant::NoTti,
        Variant::NoTds,
        Variant::HardBudget,
        Variant::FilterVoid,
        Variant::EntropyOnly,
        Variant::ConfidenceOnly,
        Variant::Dapo,
        Variant::NoRft,
        Variant::LengthReward,
        Variant::PeakCut,
        Variant::Calibrated,
    ];

    /// The arm of this [`name`](Self::name) (case-insensitive).
    pub fn from_name(name: &str) -> Result<Variant> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| {
                let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
                Error::invalid(
                    "--arms",
                    format!("{name:?} is not an arm: one of {}", names.join(", ")),
                )
            })
    }

    /// Its name in tables and folders.
    pub fn name(self) -> &'static str {
        match self {
            Variant::T2po => "T2PO",
            Variant::Gigpo => "GiGPO",
            Variant::Grpo => "GRPO",
            Variant::NoTti => "T2PO-TTI",
            Variant::NoTds => "T2PO-TDS",
            Variant::HardBudget => "GiGPO-budget",
            Variant::FilterVoid => "GiGPO-void-filter",
            Variant::EntropyOnly => "T2PO-entropy-only",
            Variant::ConfidenceOnly => "T2PO-confidence-only",
            Variant::Dapo => "DAPO",
            Variant::NoRft => "T2PO-RFT",
            Variant::LengthReward => "GiGPO-length-reward",
            Variant::PeakCut => "T2PO-peak-cut",
            Variant::Calibrated => "T2PO-calibrated",
        }
    }

    /// `base` changed to this arm.
    pub fn apply(self, base: &TrainConfig) -> TrainConfig {
        let mut c = base.clone();
        let (tti, tds, est) = match self {
            Variant::T2po
            | Variant::EntropyOnly
            | Variant::ConfidenceOnly
            | Variant::NoRft
            | Variant::PeakCut
            | Variant::Calibrated => (true, true, Estimator::Gigpo),
            Variant::Gigpo | Variant::HardBudget | Variant::FilterVoid | Variant::LengthReward => {
                (false, false, Estimator::Gigpo)
            }
            Variant::Grpo | Variant::Dapo => (false, false, Estimator::Grpo),
            Variant::NoTti => (false, true, Estimator::Gigpo),
            Variant::NoTds => (true, false, Estimator::Gigpo),
        };
        c.control.tti = tti;
        c.control.tds = tds;
        c.algo.estimator = est;
        match self {
            Variant::HardBudget => c.control.hard_budget = true,
            Variant::FilterVoid => c.control.filter_void = true,
            Variant::EntropyOnly => c.control.alpha = Some(1.0),
            Variant::ConfidenceOnly => c.control.alpha = Some(0.0),
            Variant::Dapo => {
                c.algo.dynamic_sampling = true;
                c.algo.clip_high = 0.28;
            }
            Variant::NoRft => {
                c.rft.demo_tasks = 0;
                c.rft.rounds = 0;
            }
            Variant::LengthReward if c.algo.length_reward == 0.0 => {
                c.algo.length_reward = LENGTH_REWARD_WEIGHT;
            }
            Variant::PeakCut => c.control.trigger = Some(TriggerName::PeakCut),
            Variant::Calibrated => {
                c.control.calibrate = true;
                c.control.calibrated = None;
                // The released profile's own rule is patience; ε belongs to the window mean.
                c.control.trigger = Some(TriggerName::WindowMean);
            }
            _ => {}
        }
        c
    }
}

/// One arm's result over the seeds.
#[derive(Clone, Debug)]
pub struct ArmResult {
    /// The arm.
    pub variant: Variant,
    /// Held-out evaluation of the cold start with this arm's settings (its TTI/TDS switches
    /// change what the same policy does), one per seed.
    pub before: Vec<RolloutSummary>,
    /// Held-out evaluation after RL, one per seed.
    pub after: Vec<RolloutSummary>,
    /// Held-out success sampled at the rollout temperature after RL, one per seed (when
    /// `train.eval_sampled`).
    pub sampled_after: Vec<f64>,
    /// Wall seconds of RL, one per seed.
    pub seconds: Vec<f64>,
    /// Held-out success per evaluation iteration, one curve per seed.
    pub curves: Vec<Vec<(f64, f64)>>,
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n.max(1.0);
    let s = if v.len() > 1 {
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (m, s)
}

/// What one arm's run on one seed gave.
struct ArmOutcome {
    before: RolloutSummary,
    after: RolloutSummary,
    sampled_after: Option<f64>,
    seconds: f64,
    curve: Vec<(f64, f64)>,
}

impl ArmResult {
    fn push(&mut self, o: ArmOutcome) {
        self.before.push(o.before);
        self.after.push(o.after);
        if let Some(s) = o.sampled_after {
            self.sampled_after.push(s);
        }
        self.seconds.push(o.seconds);
        self.curves.push(o.curve);
    }
}

/// RL of `variant` on `cfg` (one seed's) into `dir`, from the seed's cold start `init`.
fn run_arm(
    variant: Variant,
    cfg: &TrainConfig,
    dir: &Path,
    init: &Path,
    device: &Device,
    rep: &mut dyn Reporter,
) -> Result<ArmOutcome> {
    // −RFT runs its own cold start with no SFT and no rejection round: the pretraining (the
    // same seed, the same policy as the shared cold start's) and then RL.
    let no_rft = variant == Variant::NoRft;
    let r = train(
        variant.apply(cfg),
        &RunOptions {
            out: dir.to_path_buf(),
            resume: true,
            explicit_config: false,
            iterations_given: false,
            init: (!no_rft).then(|| init.to_path_buf()),
            device: device.clone(),
            cold_start: no_rft,
            rl: true,
        },
        rep,
    )?;
    let lines = MetricsLog::new(dir.join("metrics.jsonl")).read()?;
    Ok(ArmOutcome {
        curve: lines
            .iter()
            .filter_map(|l| {
                l.eval
                    .as_ref()
                    .map(|e| (l.iteration as f64, e.success_rate))
            })
            .collect(),
        seconds: lines
            .iter()
            .filter(|l| l.stage == "rl")
            .map(|l| l.seconds)
            .sum(),
        before: r.before.unwrap_or_default(),
        after: r.after.unwrap_or_default(),
        sampled_after: lines
            .iter()
            .rev()
            .find_map(|l| l.eval_sampled.as_ref())
            .map(|s| s.success_rate),
    })
}

/// Runs each of `variants` for every seed under `out`; returns the arms and the markdown
/// table (also written to `out/ablation.md`, with `out/ablation_success.png`).
///
/// Each seed's cold start runs first, on the caller's rayon pool; then its arms run `jobs`
/// at a time, each on a pool of its own with an equal share of the caller's threads (at
/// least one). Each arm is a run of its own folder with its own seeded state, so with the
/// same threads per arm the table does not depend on `jobs` (`tests/ablate.rs`: `jobs` 1 on
/// one thread and 2 on two give the same table and metrics; whether a run's figures depend on
/// its thread count is not checked there). With `jobs` > 1 the arms' progress comes to
/// `rep` as lines prefixed with the arm's name (no progress bars), and a stop that `rep`
/// requests reaches every running arm.
pub fn ablate(
    base: &TrainConfig,
    variants: &[Variant],
    seeds: &[u64],
    jobs: usize,
    out: &Path,
    device: &Device,
    rep: &mut dyn Reporter,
) -> Result<(Vec<ArmResult>, String)> {
    if seeds.is_empty() {
        return Err(Error::invalid("--seeds", "at least one seed"));
    }
    if variants.is_empty() {
        return Err(Error::invalid("--arms", "at least one arm"));
    }
    if jobs == 0 {
        return Err(Error::invalid("--jobs", "at least one arm at a time"));
    }
    let mut arms: Vec<ArmResult> = variants
        .iter()
        .map(|&v| ArmResult {
            variant: v,
            before: Vec::new(),
            after: Vec::new(),
            sampled_after: Vec::new(),
            seconds: Vec::new(),
            curves: Vec::new(),
        })
        .collect();
    for &seed in seeds {
        let mut cfg = base.clone();
        cfg.seed = seed;
        let seed_dir = out.join(format!("seed-{seed}"));
        let cold_out = seed_dir.join("cold");
        rep.line(&format!("ablation seed {seed}: cold start"));
        train(
            cfg.clone(),
            &RunOptions {
                out: cold_out.clone(),
                resume: true,
                explicit_config: false,
                iterations_given: false,
                init: None,
                device: device.clone(),
                cold_start: true,
                rl: false,
            },
            rep,
        )?;
        let init: PathBuf = cold_out.join("cold-start");
        if jobs == 1 || arms.len() == 1 {
            for arm in &mut arms {
                rep.line(&format!("ablation seed {seed}: {}", arm.variant.name()));
                let dir = seed_dir.join(arm.variant.name());
                arm.push(run_arm(arm.variant, &cfg, &dir, &init, device, rep)?);
            }
        } else {
            let variants: Vec<Variant> = arms.iter().map(|a| a.variant).collect();
            let outcomes =
                parallel_arms(&variants, seed, &cfg, &seed_dir, &init, jobs, device, rep)?;
            for (arm, o) in arms.iter_mut().zip(outcomes) {
                arm.push(o);
            }
        }
    }
    let table = table(base, seeds, &arms);
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    crate::model::checkpoint::write_atomic(&out.join("ablation.md"), table.as_bytes())?;
    let chart = Chart {
        title: format!(
            "Held-out success, {} (mean over {} seeds)",
            base.env.as_str(),
            seeds.len()
        ),
        x_label: "RL iteration".into(),
        y_label: "success rate".into(),
        series: arms
            .iter()
            .map(|a| Series::new(a.variant.name(), mean_curve(&a.curves)))
            .collect(),
    };
    match write_png(&out.join("ablation_success.png"), &chart, 900, 520) {
        Ok(()) | Err(PlotError::Empty { .. }) => {}
        Err(e) => return Err(Error::invalid("plot", e.to_string())),
    }
    Ok((arms, table))
}

/// What a parallel arm sends to the thread that owns the caller's reporter.
enum Message {
    Line(String),
    Done(usize, Box<Result<ArmOutcome>>),
}

/// A parallel arm's reporter: its lines go to the caller's reporter with the arm's name in
/// front; its phases are not drawn (bars of several arms would overwrite each other); a stop
/// the caller's reporter requested reaches it through `stop` (0: none).
struct ArmReporter<'a> {
    prefix: String,
    tx: mpsc::Sender<Message>,
    stop: &'a AtomicI32,
}

impl Reporter for ArmReporter<'_> {
    fn line(&mut self, text: &str) {
        let text: Vec<String> = text
            .lines()
            .map(|l| format!("{}{l}", self.prefix))
            .collect();
        // The receiver outlives every worker (it is dropped after the scope joins them).
        let _ = self.tx.send(Message::Line(text.join("\n")));
    }
    fn begin(&mut self, _phase: &str, _total: usize) {}
    fn advance(&mut self, _done: usize) {}
    fn end(&mut self) {}
    fn stop_requested(&self) -> Option<i32> {
        match self.stop.load(Ordering::Relaxed) {
            0 => None,
            signal => Some(signal),
        }
    }
}

/// One seed's arms, `jobs` at a time (see [`ablate`]); their outcomes in `variants`' order.
/// After an arm fails no new arm starts; those running finish; the first failure (in arm
/// order) is returned.
#[allow(clippy::too_many_arguments)]
fn parallel_arms(
    variants: &[Variant],
    seed: u64,
    cfg: &TrainConfig,
    seed_dir: &Path,
    init: &Path,
    jobs: usize,
    device: &Device,
    rep: &mut dyn Reporter,
) -> Result<Vec<ArmOutcome>> {
    let n = variants.len();
    let workers = jobs.min(n);
    let threads = (rayon::current_num_threads() / workers).max(1);
    let pools = (0..workers)
        .map(|_| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .map_err(|e| Error::invalid("--jobs", format!("a thread pool for an arm: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    rep.line(&format!(
        "ablation seed {seed}: {n} arms, {workers} at a time on {threads} thread(s) each"
    ));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let stop = AtomicI32::new(0);
    let mut outcomes: Vec<Option<Result<ArmOutcome>>> = (0..n).map(|_| None).collect();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for pool in &pools {
            let tx = tx.clone();
            let (next, failed, stop) = (&next, &failed, &stop);
            scope.spawn(move || loop {
                if failed.load(Ordering::Relaxed) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&v) = variants.get(i) else { break };
                let _ = tx.send(Message::Line(format!(
                    "ablation seed {seed}: {} begins",
                    v.name()
                )));
                let mut arm_rep = ArmReporter {
                    prefix: format!("[{}] ", v.name()),
                    tx: tx.clone(),
                    stop,
                };
                let dir = seed_dir.join(v.name());
                let r = pool.install(|| run_arm(v, cfg, &dir, init, device, &mut arm_rep));
                if r.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                let _ = tx.send(Message::Done(i, Box::new(r)));
            });
        }
        drop(tx);
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(Message::Line(l)) => rep.line(&l),
                Ok(Message::Done(i, r)) => {
                    if r.is_ok() {
                        rep.line(&format!(
                            "ablation seed {seed}: {} done",
                            variants[i].name()
                        ));
                    }
                    outcomes[i] = Some(*r);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if let Some(signal) = rep.stop_requested() {
                stop.store(signal, Ordering::Relaxed);
            }
        }
    });
    let mut done = Vec::with_capacity(n);
    let mut first_error = None;
    for o in outcomes.into_iter().flatten() {
        match o {
            Ok(x) => done.push(x),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    // Every arm reports before its worker ends (a panic would have crossed the scope).
    debug_assert_eq!(done.len(), n);
    Ok(done)
}

fn mean_curve(curves: &[Vec<(f64, f64)>]) -> Vec<(f64, f64)> {
    let Some(first) = curves.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|&(x, _)| {
            let ys: Vec<f64> = curves
                .iter()
                .filter_map(|c| c.iter().find(|p| p.0 == x).map(|p| p.1))
                .collect();
            (x, mean_std(&ys).0)
        })
        .collect()
}

/// The markdown table of the arms.
pub fn table(base: &TrainConfig, seeds: &[u64], arms: &[ArmResult]) -> String {
    let mut s = format!(
        "{}, {} RL iterations × {} tasks × {} episodes, seeds {:?}; held-out: {} tasks × {} episodes\n\n\
         | method | held-out success before RL | after RL (mean ± std) | gain (mean ± std) | sampled after | task score | format-valid turns | think tokens/turn | turns/episode | TDS resample rate | RL wall time (s) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
        base.env.as_str(),
        base.train.iterations,
        base.rollout.tasks_per_iteration,
        base.rollout.group_size,
        seeds,
        base.train.eval_tasks,
        base.train.eval_episodes,
    );
    for a in arms {
        let f = |g: &dyn Fn(&RolloutSummary) -> f64| {
            mean_std(&a.after.iter().map(g).collect::<Vec<_>>())
        };
        let (bm, bs) = mean_std(&a.before.iter().map(|e| e.success_rate).collect::<Vec<_>>());
        let (sm, ss) = f(&|e| e.success_rate);
        let gains: Vec<f64> = a
            .before
            .iter()
            .zip(&a.after)
            .map(|(b, e)| e.success_rate - b.success_rate)
            .collect();
        let (gm, gs) = mean_std(&gains);
        let sampled = if a.sampled_after.is_empty() {
            "–".to_string()
        } else {
            let (m, s) = mean_std(&a.sampled_after);
            format!("{m:.3} ± {s:.3}")
        };
        let (sc, _) = f(&|e| e.score);
        let (fv, _) = f(&|e| e.format_valid_rate);
        let (th, _) = f(&|e| e.think_tokens_per_turn);
        let (tu, _) = f(&|e| e.turns_per_episode);
        let (rs, _) = f(&|e| e.tds_resample_rate);
        let (wt, _) = mean_std(&a.seconds);
        s.push_str(&format!(
            "| {} | {bm:.3} ± {bs:.3} | {sm:.3} ± {ss:.3} | {gm:+.3} ± {gs:.3} | {sampled} | {sc:.3} | {fv:.3} | {th:.1} | {tu:.2} | {rs:.3} | {wt:.0} |\n",
            a.variant.name()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::EnvKind;

    #[test]
    fn the_arms_switch_exactly_what_their_names_say() {
        let base = TrainConfig::default_for(EnvKind::Alfworld).unwrap();
        let get = |v: Variant| {
            let c = v.apply(&base);
            (c.control.tti, c.control.tds, c.algo.estimator)
        };
        assert_eq!(get(Variant::T2po), (true, true, Estimator::Gigpo));
        assert_eq!(get(Variant::Gigpo), (false, false, Estimator::Gigpo));
        assert_eq!(get(Variant::Grpo), (false, false, Estimator::Grpo));
        assert_eq!(get(Variant::NoTti), (false, true, Estimator::Gigpo));
        assert_eq!(get(Variant::NoTds), (true, false, Estimator::Gigpo));
        assert_eq!(get(Variant::HardBudget), (false, false, Estimator::Gigpo));
        assert_eq!(get(Variant::FilterVoid), (false, false, Estimator::Gigpo));
        assert_eq!(get(Variant::EntropyOnly), (true, true, Estimator::Gigpo));
        assert_eq!(get(Variant::ConfidenceOnly), (true, true, Estimator::Gigpo));
        assert_eq!(get(Variant::Dapo), (false, false, Estimator::Grpo));
        assert_eq!(get(Variant::NoRft), (true, true, Estimator::Gigpo));
        assert_eq!(get(Variant::LengthReward), (false, false, Estimator::Gigpo));
        assert_eq!(get(Variant::PeakCut), (true, true, Estimator::Gigpo));
        assert_eq!(
            Variant::PeakCut.apply(&base).control.trigger,
            Some(TriggerName::PeakCut)
        );
        assert_eq!(get(Variant::Calibrated), (true, true, Estimator::Gigpo));
        let cal = Variant::Calibrated.apply(&base);
        assert!(cal.control.calibrate && cal.control.calibrated.is_none());
        assert_eq!(cal.control.trigger, Some(TriggerName::WindowMean));
        cal.validate(Path::new("x.toml")).unwrap();
        let no_rft = Variant::NoRft.apply(&base);
        assert!(no_rft.rft.demo_tasks == 0 && no_rft.rft.rounds == 0);
        assert_eq!(
            Variant::LengthReward.apply(&base).algo.length_reward,
            LENGTH_REWARD_WEIGHT
        );
        let mut weighted = base.clone();
        weighted.algo.length_reward = 2.0;
        assert_eq!(
            Variant::LengthReward.apply(&weighted).algo.length_reward,
            2.0
        );
        let dapo = Variant::Dapo.apply(&base);
        assert!(dapo.algo.dynamic_sampling && dapo.algo.clip_high == 0.28);
        assert!(Variant::HardBudget.apply(&base).control.hard_budget);
        assert!(Variant::FilterVoid.apply(&base).control.filter_void);
        assert_eq!(Variant::EntropyOnly.apply(&base).control.alpha, Some(1.0));
        assert_eq!(
            Variant::ConfidenceOnly.apply(&base).control.alpha,
            Some(0.0)
        );
        // Nothing else changes.
        for v in Variant::ALL {
            let mut c = v.apply(&base);
            c.control.tti = base.control.tti;
            c.control.tds = base.control.tds;
            c.algo.estimator = base.algo.estimator;
            c.control.hard_budget = base.control.hard_budget;
            c.control.filter_void = base.control.filter_void;
            c.control.alpha = base.control.alpha;
            c.algo.dynamic_sampling = base.algo.dynamic_sampling;
            c.algo.clip_high = base.algo.clip_high;
            c.rft.demo_tasks = base.rft.demo_tasks;
            c.rft.rounds = base.rft.rounds;
            c.algo.length_reward = base.algo.length_reward;
            c.control.trigger = base.control.trigger;
            c.control.calibrate = base.control.calibrate;
            assert_eq!(c, base, "{}", v.name());
        }
        // Names round-trip; a wrong one lists the right ones.
        for v in Variant::ALL {
            assert_eq!(Variant::from_name(&v.name().to_lowercase()).unwrap(), v);
        }
        let e = Variant::from_name("PPO-max").unwrap_err().to_string();
        assert!(e.contains("GiGPO-budget") && e.contains("PPO-max"), "{e}");
    }

    /// The arms' α and trigger reach the kernel: M_t from entropy alone or confidence alone,
    /// and peak-cut.
    #[test]
    fn alpha_reaches_the_kernel_config() {
        let base = TrainConfig::default_for(EnvKind::Search).unwrap();
        let tok = crate::defaults::tokenizer(base.seed).unwrap();
        let tokens = tok.control_tokens().unwrap();
        let control = |v: Variant| {
            v.apply(&base)
                .rollout_config(&tokens, 1.0, 0)
                .unwrap()
                .control
        };
        let alpha = |v: Variant| control(v).alpha;
        assert_eq!(alpha(Variant::EntropyOnly), 1.0);
        assert_eq!(alpha(Variant::ConfidenceOnly), 0.0);
        assert_eq!(alpha(Variant::T2po), 0.4);
        let mut bad = base.clone();
        bad.control.alpha = Some(1.5);
        let e = bad.validate(Path::new("x.toml")).unwrap_err().to_string();
        assert!(e.contains("control.alpha"), "{e}");
        // The trigger too; and with the hard budget, which has no convergence rule, it is refused.
        let trigger = |v: Variant| control(v).trigger;
        assert_eq!(
            trigger(Variant::PeakCut),
            t2po_control::Trigger::PeakCut as u32
        );
        assert_eq!(
            trigger(Variant::T2po),
            t2po_control::Trigger::WindowMean as u32
        );
        let mut both = Variant::HardBudget.apply(&base);
        both.control.trigger = Some(TriggerName::PeakCut);
        let e = both.validate(Path::new("x.toml")).unwrap_err().to_string();
        assert!(
            e.contains("control.trigger") && e.contains("hard_budget"),
            "{e}"
        );
    }

    #[test]
    fn the_table_gives_each_arms_start_end_and_gain_over_seeds() {
        let base = TrainConfig::default_for(EnvKind::Search).unwrap();
        let at = |success_rate: f64| RolloutSummary {
            success_rate,
            ..RolloutSummary::default()
        };
        let arm = ArmResult {
            variant: Variant::T2po,
            before: vec![at(0.3), at(0.5)],
            after: vec![at(0.4), at(0.8)],
            sampled_after: vec![0.25, 0.35],
            seconds: vec![10.0, 20.0],
            curves: Vec::new(),
        };
        let no_sampled = ArmResult {
            variant: Variant::Gigpo,
            sampled_after: Vec::new(),
            ..arm.clone()
        };
        let t = table(&base, &[1, 2], &[arm, no_sampled]);
        // before 0.4 ± 0.141, after 0.6 ± 0.283, gains +0.1 and +0.3: +0.200 ± 0.141.
        assert!(
            t.contains("| T2PO | 0.400 ± 0.141 | 0.600 ± 0.283 | +0.200 ± 0.141 | 0.300 ± 0.071 |"),
            "{t}"
        );
        assert!(
            t.contains("| GiGPO | 0.400 ± 0.141 | 0.600 ± 0.283 | +0.200 ± 0.141 | – |"),
            "{t}"
        );
        let header = t.lines().find(|l| l.starts_with("| method")).unwrap();
        let row = t.lines().find(|l| l.starts_with("| T2PO")).unwrap();
        assert_eq!(header.matches('|').count(), row.matches('|').count());
    }

    #[test]
    fn mean_and_unbiased_std() {
        assert_eq!(mean_std(&[1.0, 3.0]), (2.0, 2f64.sqrt()));
        assert_eq!(mean_std(&[5.0]), (5.0, 0.0));
        let c = mean_curve(&[vec![(0.0, 0.2), (4.0, 0.4)], vec![(0.0, 0.4), (4.0, 0.6)]]);
        assert!((c[0].1 - 0.3).abs() < 1e-12 && (c[1].1 - 0.5).abs() < 1e-12);
    }
}
