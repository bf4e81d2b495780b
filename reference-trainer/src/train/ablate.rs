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
use super::progress::{PlainProgress, PLAIN_PROGRESS_EVERY};
use super::rft::Reporter;
use super::run::{train, RunOptions};
use super::state;
use crate::algo::Estimator;
use crate::error::{Error, Result};
use crate::rollout::TriggerName;
use candle_core::Device;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Condvar, Mutex};
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
    eval_cache: &Path,
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
            eval_cache: Some(eval_cache.to_path_buf()),
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
/// `jobs` = 1 (or one seed of one arm): each seed's cold start, then its arms one after another, all on the caller's
/// rayon pool, with `rep`'s progress bars. `jobs` > 1: the first seed's cold start on the
/// caller's pool, then every other run — the other seeds' cold starts first, then the arms
/// seed by seed — `jobs` at a time, each on a pool of its own with an equal share of the
/// caller's threads (at least one); an arm starts once its seed's cold start is done (−RFT,
/// which makes its own, at once), so later seeds' cold starts run beside earlier seeds' arms
/// (`Queue`). Each run is a folder of its own with its own seeded state, so with the same
/// threads per run the table does not depend on `jobs` (`tests/ablate.rs`: `jobs` 1 on one
/// thread and 2 on two give the same table and metrics; whether a run's figures depend on its
/// thread count is not checked there). With `jobs` > 1 the runs' lines come to `rep` with the
/// seed and run in front (`[2026 GiGPO] iter 3/30: …`), their phases' progress as
/// [`Reporter::progress`] lines once a minute (no bars), and a stop that `rep` requests reaches
/// every running run; after a failure no new run starts, the running ones end, and the first
/// failure (seeds in order, a seed's cold start before its arms, arms in order) is returned.
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
    let plan = Plan {
        base,
        variants,
        seeds,
        out,
        device,
    };
    // One seed of one arm has nothing to run beside it: keep the bars.
    if jobs == 1 || (seeds.len() == 1 && variants.len() == 1) {
        for (s, seed) in seeds.iter().enumerate() {
            rep.line(&format!("ablation seed {seed}: cold start"));
            plan.cold_start(s, rep)?;
            for (a, arm) in arms.iter_mut().enumerate() {
                rep.line(&format!("ablation seed {seed}: {}", arm.variant.name()));
                arm.push(plan.arm(s, a, rep)?);
            }
        }
    } else {
        rep.line(&format!("ablation seed {}: cold start", seeds[0]));
        plan.cold_start(0, rep)?;
        let grid = parallel_runs(&plan, jobs, rep)?;
        for row in grid {
            for (arm, o) in arms.iter_mut().zip(row) {
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

/// What an ablation runs, and where.
struct Plan<'a> {
    base: &'a TrainConfig,
    variants: &'a [Variant],
    seeds: &'a [u64],
    out: &'a Path,
    device: &'a Device,
}

impl Plan<'_> {
    fn config(&self, s: usize) -> TrainConfig {
        let mut cfg = self.base.clone();
        cfg.seed = self.seeds[s];
        cfg
    }

    /// Where the runs keep their evaluations before RL: an arm that evaluates its cold start
    /// as an earlier run did (T²PO as the seed's cold-start run, GRPO as GiGPO, …) takes
    /// those figures instead of decoding them again ([`super::eval_cache`]).
    fn eval_cache(&self) -> PathBuf {
        self.out.join("eval-cache")
    }

    fn seed_dir(&self, s: usize) -> PathBuf {
        self.out.join(format!("seed-{}", self.seeds[s]))
    }

    /// Seed `s`'s cold start (resumed or left as it is when it has run).
    fn cold_start(&self, s: usize, rep: &mut dyn Reporter) -> Result<()> {
        train(
            self.config(s),
            &RunOptions {
                out: self.seed_dir(s).join("cold"),
                resume: true,
                explicit_config: false,
                iterations_given: false,
                init: None,
                device: self.device.clone(),
                cold_start: true,
                rl: false,
                eval_cache: Some(self.eval_cache()),
            },
            rep,
        )?;
        Ok(())
    }

    /// Arm `a` on seed `s`, from the seed's cold start.
    fn arm(&self, s: usize, a: usize, rep: &mut dyn Reporter) -> Result<ArmOutcome> {
        let v = self.variants[a];
        let dir = self.seed_dir(s);
        run_arm(
            v,
            &self.config(s),
            &dir.join(v.name()),
            &dir.join("cold").join("cold-start"),
            &self.eval_cache(),
            self.device,
            rep,
        )
    }

    /// Whether `job` ran to its end before (its latest checkpoint is past the cold start and, for
    /// an arm, holds its last iteration, taken after that iteration's evaluation): resuming it
    /// only reads its results. A folder that cannot be read counts as not finished; the run
    /// itself reports what is wrong with it.
    fn finished(&self, job: Job) -> bool {
        let (dir, iterations) = match job {
            Job::Cold(s) => (self.seed_dir(s).join("cold"), 0),
            Job::Arm(s, a) => {
                let v = self.variants[a];
                let iterations = v.apply(&self.config(s)).train.iterations;
                (self.seed_dir(s).join(v.name()), iterations)
            }
        };
        matches!(state::latest(&dir), Ok(Some(d))
            if state::read_state(&d)
                .is_ok_and(|st| st.cold_start.is_none() && st.iteration >= iterations))
    }

    fn job_name(&self, job: Job) -> String {
        match job {
            Job::Cold(s) => format!("{} cold start", self.seeds[s]),
            Job::Arm(s, a) => format!("{} {}", self.seeds[s], self.variants[a].name()),
        }
    }
}

/// One run of an ablation: seed `s`'s cold start, or arm `a` on seed `s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Job {
    Cold(usize),
    Arm(usize, usize),
}

impl Job {
    /// Where a failure of this run ranks: seeds in order, a seed's cold start before its arms,
    /// arms in order.
    fn rank(self) -> (usize, usize) {
        match self {
            Job::Cold(s) => (s, 0),
            Job::Arm(s, a) => (s, a + 1),
        }
    }
}

/// What the next free worker does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Start this run.
    Start(Job),
    /// Nothing is ready yet: wait for a running cold start to end.
    Wait,
    /// Nothing is left to start (or a run failed): end.
    Finished,
}

/// The order of an ablation's runs over `jobs` > 1 workers: every cold start not yet done
/// first (each unblocks a seed's arms), then the arms seed by seed; an arm is ready when its
/// seed's cold start is done, or at once when it makes its own (−RFT). Once a run fails,
/// nothing new starts.
#[derive(Clone, Debug)]
struct Queue {
    order: Vec<Job>,
    started: Vec<bool>,
    /// Per seed: `Some(true)` when its cold start is done, `Some(false)` when it failed.
    cold: Vec<Option<bool>>,
    /// Per arm: whether it needs its seed's cold start.
    needs_cold: Vec<bool>,
    failed: bool,
}

impl Queue {
    /// `seeds` seeds whose cold starts up to `cold_done` (exclusive) are done, and the arms
    /// `needs_cold` says depend on them.
    fn new(seeds: usize, needs_cold: Vec<bool>, cold_done: usize) -> Self {
        let mut order: Vec<Job> = (cold_done..seeds).map(Job::Cold).collect();
        for s in 0..seeds {
            order.extend((0..needs_cold.len()).map(|a| Job::Arm(s, a)));
        }
        Self {
            started: vec![false; order.len()],
            order,
            cold: (0..seeds)
                .map(|s| (s < cold_done).then_some(true))
                .collect(),
            needs_cold,
            failed: false,
        }
    }

    fn ready(&self, job: Job) -> bool {
        match job {
            Job::Cold(_) => true,
            Job::Arm(s, a) => !self.needs_cold[a] || self.cold[s] == Some(true),
        }
    }

    fn next(&mut self) -> Next {
        if self.failed {
            return Next::Finished;
        }
        let pending = |i: usize| !self.started[i];
        if let Some(i) = (0..self.order.len()).find(|&i| pending(i) && self.ready(self.order[i])) {
            self.started[i] = true;
            return Next::Start(self.order[i]);
        }
        if (0..self.order.len()).any(pending) {
            Next::Wait
        } else {
            Next::Finished
        }
    }

    fn finish(&mut self, job: Job, ok: bool) {
        if let Job::Cold(s) = job {
            self.cold[s] = Some(ok);
        }
        if !ok {
            self.failed = true;
        }
    }

    fn len(&self) -> usize {
        self.order.len()
    }
}

/// The next run for a free worker, waiting while none is ready; `None`: the worker ends.
fn take(queue: &(Mutex<Queue>, Condvar)) -> Option<Job> {
    let mut q = queue.0.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        match q.next() {
            Next::Start(job) => return Some(job),
            Next::Wait => q = queue.1.wait(q).unwrap_or_else(|e| e.into_inner()),
            Next::Finished => return None,
        }
    }
}

/// Tells the queue that a run ended (failed unless `ok`) and wakes the waiting workers, also
/// when the run panicked: a worker waiting for a cold start that panicked would otherwise wait
/// for ever, and the scope would never end to pass the panic on.
struct Ending<'q> {
    queue: &'q (Mutex<Queue>, Condvar),
    job: Job,
    ok: bool,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        let mut q = self.queue.0.lock().unwrap_or_else(|e| e.into_inner());
        q.finish(self.job, self.ok);
        self.queue.1.notify_all();
    }
}

/// What a parallel run sends to the thread that owns the caller's reporter.
enum Message {
    Line(String),
    Progress(String),
    Done(Job, Box<Result<Option<ArmOutcome>>>),
}

/// A parallel run's reporter: its lines go to the caller's reporter with the run's name in
/// front; its phases are not drawn (bars of several runs would overwrite each other) but
/// written as a progress line once per `every`; a stop the caller's reporter requested
/// reaches it through `stop` (0: none).
struct ArmReporter<'a> {
    prefix: String,
    tx: mpsc::Sender<Message>,
    stop: &'a AtomicI32,
    every: Duration,
    plain: Option<PlainProgress>,
}

impl ArmReporter<'_> {
    fn send(&self, m: Message) {
        // The receiver outlives every worker (it is dropped after the scope joins them).
        let _ = self.tx.send(m);
    }

    /// A progress line, its leading indent replaced by the run's name.
    fn send_progress(&self, line: &str) {
        self.send(Message::Progress(self.prefixed(line.trim_start())));
    }

    fn prefixed(&self, text: &str) -> String {
        text.lines()
            .map(|l| format!("{}{l}", self.prefix))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Reporter for ArmReporter<'_> {
    fn line(&mut self, text: &str) {
        self.send(Message::Line(self.prefixed(text)));
    }
    fn begin(&mut self, phase: &str, total: usize) {
        self.plain = Some(PlainProgress::begin(phase, total, self.every));
    }
    fn advance(&mut self, done: usize) {
        if let Some(line) = self.plain.as_mut().and_then(|p| p.advance(done)) {
            self.send_progress(&line);
        }
    }
    fn end(&mut self) {
        self.plain = None;
    }
    fn progress(&mut self, text: &str) {
        self.send_progress(text);
    }
    fn stop_requested(&self) -> Option<i32> {
        match self.stop.load(Ordering::Relaxed) {
            0 => None,
            signal => Some(signal),
        }
    }
}

/// Every run after the first seed's cold start, `jobs` at a time in [`Queue`]'s order (see
/// [`ablate`]); the arms' outcomes per seed, in `plan.variants`' order.
fn parallel_runs(
    plan: &Plan<'_>,
    jobs: usize,
    rep: &mut dyn Reporter,
) -> Result<Vec<Vec<ArmOutcome>>> {
    let needs_cold: Vec<bool> = plan.variants.iter().map(|&v| v != Variant::NoRft).collect();
    let queue = Queue::new(plan.seeds.len(), needs_cold, 1);
    let (colds, runs) = (plan.seeds.len() - 1, queue.len());
    let workers = jobs.min(runs).max(1);
    let threads = (rayon::current_num_threads() / workers).max(1);
    let pools = (0..workers)
        .map(|_| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .map_err(|e| Error::invalid("--jobs", format!("a thread pool for a run: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let finished = queue.order.iter().filter(|&&j| plan.finished(j)).count();
    rep.line(&format!(
        "ablation: {runs} runs ({colds} cold start(s), {} arm(s)){}, {workers} at a time on \
         {threads} thread(s) each",
        runs - colds,
        if finished > 0 {
            format!(", {finished} of them finished before (resumed as done)")
        } else {
            String::new()
        }
    ));
    let queue = (Mutex::new(queue), Condvar::new());
    let stop = AtomicI32::new(0);
    let mut outcomes: Vec<Vec<Option<ArmOutcome>>> = (0..plan.seeds.len())
        .map(|_| (0..plan.variants.len()).map(|_| None).collect())
        .collect();
    let mut first_error: Option<(Job, Error)> = None;
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for pool in &pools {
            let tx = tx.clone();
            let (queue, stop) = (&queue, &stop);
            scope.spawn(move || loop {
                let Some(job) = take(queue) else { return };
                let name = plan.job_name(job);
                let _ = tx.send(Message::Line(format!("ablation: {name} begins")));
                let mut run_rep = ArmReporter {
                    prefix: format!("[{name}] "),
                    tx: tx.clone(),
                    stop,
                    every: PLAIN_PROGRESS_EVERY,
                    plain: None,
                };
                let mut ending = Ending {
                    queue,
                    job,
                    ok: false,
                };
                let r = pool.install(|| match job {
                    Job::Cold(s) => plan.cold_start(s, &mut run_rep).map(|()| None),
                    Job::Arm(s, a) => plan.arm(s, a, &mut run_rep).map(Some),
                });
                ending.ok = r.is_ok();
                drop(ending);
                let _ = tx.send(Message::Done(job, Box::new(r)));
            });
        }
        drop(tx);
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(Message::Line(l)) => rep.line(&l),
                Ok(Message::Progress(l)) => rep.progress(&l),
                Ok(Message::Done(job, r)) => match *r {
                    Ok(o) => {
                        rep.line(&format!("ablation: {} done", plan.job_name(job)));
                        if let (Job::Arm(s, a), Some(o)) = (job, o) {
                            outcomes[s][a] = Some(o);
                        }
                    }
                    Err(e) => {
                        if first_error
                            .as_ref()
                            .is_none_or(|(j, _)| job.rank() < j.rank())
                        {
                            first_error = Some((job, e));
                        }
                    }
                },
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if let Some(signal) = rep.stop_requested() {
                stop.store(signal, Ordering::Relaxed);
            }
        }
    });
    if let Some((_, e)) = first_error {
        return Err(e);
    }
    // Without a failure every run ended and reported (a panic would have crossed the scope).
    outcomes
        .into_iter()
        .map(|row| row.into_iter().collect::<Option<Vec<_>>>())
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::invalid("ablate", "a run ended without a result"))
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

    /// The queue driven by `workers` workers: runs start while a worker is free and the queue
    /// gives one; then the running run `picks` names ends, failing where it says so.
    /// Returns the runs in the order they started, and whether any failed.
    fn drive(mut q: Queue, workers: usize, picks: &[(usize, bool)]) -> (Vec<Job>, bool) {
        let needs_cold = q.needs_cold.clone();
        let mut done_cold: Vec<bool> = q.cold.iter().map(|c| *c == Some(true)).collect();
        let (mut started, mut running, mut failed) = (Vec::new(), Vec::new(), false);
        let mut picks = picks.iter().cycle();
        loop {
            while running.len() < workers {
                match q.next() {
                    Next::Start(job) => {
                        assert!(!failed, "{job:?} started after a failure");
                        assert!(!started.contains(&job), "{job:?} started twice");
                        if let Job::Arm(s, a) = job {
                            assert!(
                                !needs_cold[a] || done_cold[s],
                                "{job:?} before its cold start"
                            );
                            // Cold starts come first.
                            assert!(!q
                                .order
                                .iter()
                                .zip(&q.started)
                                .any(|(j, st)| matches!(j, Job::Cold(_)) && !st));
                        }
                        started.push(job);
                        running.push(job);
                    }
                    // Something must be running to wake a waiting worker: no deadlock.
                    Next::Wait => {
                        assert!(!running.is_empty(), "waiting with nothing running");
                        break;
                    }
                    Next::Finished => break,
                }
            }
            if running.is_empty() {
                break;
            }
            let &(i, fail) = picks.next().unwrap();
            let job = running.remove(i % running.len());
            if let Job::Cold(s) = job {
                done_cold[s] = !fail;
            }
            failed |= fail;
            q.finish(job, !fail);
        }
        (started, failed)
    }

    proptest::proptest! {
        #[test]
        fn the_queue_starts_each_run_once_and_arms_after_their_cold_start(
            seeds in 1usize..5,
            needs_cold in proptest::collection::vec(proptest::bool::weighted(0.8), 1..6),
            first_done in proptest::bool::ANY,
            workers in 1usize..5,
            picks in proptest::collection::vec((0usize..8, proptest::bool::weighted(0.05)), 1..40),
        ) {
            let cold_done = usize::from(first_done);
            let q = Queue::new(seeds, needs_cold.clone(), cold_done);
            let total = q.len();
            proptest::prop_assert_eq!(total, seeds - cold_done + seeds * needs_cold.len());
            let (started, failed) = drive(q, workers, &picks);
            if !failed {
                // Without a failure every run starts (and, by `drive`, ends).
                proptest::prop_assert_eq!(started.len(), total);
            }
        }
    }

    #[test]
    fn the_queue_overlaps_a_seeds_cold_start_with_the_arms_before_it() {
        // Three seeds, the first's cold start done, two arms, two workers: the other two cold
        // starts begin at once, and seed 0's arms as soon as a worker is free.
        let mut q = Queue::new(3, vec![true, true], 1);
        assert_eq!(q.next(), Next::Start(Job::Cold(1)));
        assert_eq!(q.next(), Next::Start(Job::Cold(2)));
        assert_eq!(q.next(), Next::Start(Job::Arm(0, 0)));
        q.finish(Job::Cold(1), true);
        assert_eq!(q.next(), Next::Start(Job::Arm(0, 1)));
        assert_eq!(q.next(), Next::Start(Job::Arm(1, 0)));
        // Seed 2's arms wait for its cold start; −RFT-like arms (no cold start) would not.
        assert_eq!(q.next(), Next::Start(Job::Arm(1, 1)));
        assert_eq!(q.next(), Next::Wait);
        q.finish(Job::Cold(2), true);
        assert_eq!(q.next(), Next::Start(Job::Arm(2, 0)));
        assert_eq!(q.next(), Next::Start(Job::Arm(2, 1)));
        assert_eq!(q.next(), Next::Finished);

        let mut q = Queue::new(2, vec![true, false], 0);
        assert_eq!(q.next(), Next::Start(Job::Cold(0)));
        assert_eq!(q.next(), Next::Start(Job::Cold(1)));
        assert_eq!(q.next(), Next::Start(Job::Arm(0, 1)));
        assert_eq!(q.next(), Next::Start(Job::Arm(1, 1)));
        assert_eq!(q.next(), Next::Wait);
        // A failed cold start ends the ablation: nothing new starts.
        q.finish(Job::Cold(0), false);
        assert_eq!(q.next(), Next::Finished);
        assert!(Job::Cold(0).rank() < Job::Arm(0, 0).rank());
        assert!(Job::Arm(0, 3).rank() < Job::Cold(1).rank());
    }

    #[test]
    fn a_panicking_run_still_wakes_the_workers_waiting_for_it() {
        // Seed 1's cold start and seed 0's arm are running; seed 1's arm waits for the cold
        // start, which panics.
        let queue = (Mutex::new(Queue::new(2, vec![true], 1)), Condvar::new());
        assert_eq!(take(&queue), Some(Job::Cold(1)));
        assert_eq!(take(&queue), Some(Job::Arm(0, 0)));
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| take(&queue));
            let runner = scope.spawn(|| {
                // As a worker holds it: `ok` is set only when the run returns.
                let _ending = Ending {
                    queue: &queue,
                    job: Job::Cold(1),
                    ok: false,
                };
                // Let the waiter reach its wait (it ends the same either way).
                std::thread::sleep(Duration::from_millis(20));
                panic!("a bug in a run");
            });
            assert!(runner.join().is_err());
            assert_eq!(waiter.join().unwrap(), None);
        });
        let q = queue.0.lock().unwrap();
        assert!(q.failed && q.cold[1] == Some(false));
    }

    #[test]
    fn a_parallel_runs_lines_and_progress_carry_its_name() {
        let (tx, rx) = mpsc::channel();
        let stop = AtomicI32::new(0);
        let mut r = ArmReporter {
            prefix: "[2026 T2PO] ".into(),
            tx,
            stop: &stop,
            every: Duration::ZERO,
            plain: None,
        };
        r.line("iter 1/3: a\nsecond line");
        r.advance(1); // outside a phase: nothing
        r.begin("sft", 4);
        r.advance(2);
        r.end();
        r.advance(3);
        r.progress("  eval 9/10");
        assert_eq!(r.stop_requested(), None);
        stop.store(15, Ordering::Relaxed);
        assert_eq!(r.stop_requested(), Some(15));
        drop(r);
        let got: Vec<(bool, String)> = rx
            .iter()
            .map(|m| match m {
                Message::Line(l) => (true, l),
                Message::Progress(l) => (false, l),
                Message::Done(..) => unreachable!(),
            })
            .collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(
            got[0],
            (
                true,
                "[2026 T2PO] iter 1/3: a\n[2026 T2PO] second line".into()
            )
        );
        assert!(
            !got[1].0
                && got[1]
                    .1
                    .starts_with("[2026 T2PO] sft 2/4 (50.0 %), 0:00 elapsed")
        );
        assert_eq!(got[2], (false, "[2026 T2PO] eval 9/10".into()));
    }
}
