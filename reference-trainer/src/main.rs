//! `reference-trainer`: the command line. Parses arguments, builds things, calls the library.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use candle_core::{DType, Device};
use clap::{Parser, Subcommand, ValueEnum};
use reference_trainer::defaults;
use reference_trainer::model::{checkpoint, Qwen3};
use reference_trainer::rollout::{
    rollout, ControlSwitches, EnvKind, EnvPool, EpisodeSpec, PackedQwen3, ProfileName,
    RolloutConfig, SamplingParams, Split,
};
use reference_trainer::tokenizer::Tokenizer;
use reference_trainer::train::progress::{PlainProgress, PLAIN_PROGRESS_EVERY};
use reference_trainer::train::run::RUN_CONFIG;
use reference_trainer::train::{train, Reporter, RunOptions, RunResult, TrainConfig};

/// Log lines on stdout; one progress bar per phase on stderr, or, where stderr is not a
/// terminal (indicatif draws nothing there), a plain progress line on stderr at most once a
/// minute (`train::progress`: an hour of SFT in a log file is not silent, and stdout, which tests
/// compare between runs, stays free of timings); the signal that asked the run to stop.
struct CliReporter {
    quiet: bool,
    bar: Option<indicatif::ProgressBar>,
    /// The phase's plain progress lines, where no bar is drawn.
    plain: Option<PlainProgress>,
    /// The number of the signal that asked to stop (0: none), set by the signal handlers.
    stop: Arc<AtomicUsize>,
    fault: Option<SignalFault>,
}

impl CliReporter {
    fn new(quiet: bool) -> Self {
        Self {
            quiet,
            bar: None,
            plain: None,
            stop: Arc::new(AtomicUsize::new(0)),
            fault: None,
        }
    }

    /// Stops the run at its next safe point on SIGINT or SIGTERM (the signal's number goes to
    /// `stop`); a second one ends the process at once, with the same exit code (every file a
    /// run writes is written to a temporary name and renamed, so that is safe too).
    ///
    /// signal-hook, not ctrlc: the exit code must say which signal came (130 for SIGINT, 143
    /// for SIGTERM, as shells expect), and ctrlc's handler does not tell; signal-hook's handler
    /// only stores into an atomic, and its registry crate is already in the tree (tokio's).
    fn stop_on_signals(mut self) -> Result<Self> {
        let asked = Arc::new(AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // Registered first, so it sees the flag as the previous signal left it.
            signal_hook::flag::register_conditional_shutdown(
                signal,
                128 + signal,
                Arc::clone(&asked),
            )?;
            signal_hook::flag::register_usize(signal, Arc::clone(&self.stop), signal as usize)?;
            signal_hook::flag::register(signal, Arc::clone(&asked))?;
        }
        self.fault = SignalFault::from_env()?;
        Ok(self)
    }
}

/// Test hook, `T2PO_TEST_SIGNAL=SIG:PHASE:N[:K]` (SIG one of `TERM`, `INT`, `KILL`): the
/// process sends itself that signal in the N-th (1-based) progress phase named PHASE, right
/// after its K-th unit of work (default 1; `checkpoint`: 1 is after the model file is written,
/// `update`: a micro-batch). The tests use it to land a signal inside a given phase of a tiny
/// run, where the phases last milliseconds and a signal from outside could not be aimed. Not
/// read outside `train`.
struct SignalFault {
    signal: i32,
    phase: String,
    nth: usize,
    after: usize,
    seen: usize,
    /// Units of work left before the signal, in the phase it is aimed at.
    armed: Option<usize>,
}

impl SignalFault {
    const VAR: &'static str = "T2PO_TEST_SIGNAL";

    fn from_env() -> Result<Option<Self>> {
        let Ok(spec) = std::env::var(Self::VAR) else {
            return Ok(None);
        };
        let parts: Vec<&str> = spec.split(':').collect();
        let (signal, phase, nth, after) = match parts[..] {
            [sig, phase, n] => (sig, phase, n, "1"),
            [sig, phase, n, k] => (sig, phase, n, k),
            _ => anyhow::bail!("{}={spec:?}: expected SIG:PHASE:N[:K]", Self::VAR),
        };
        let signal = match signal {
            "TERM" => signal_hook::consts::SIGTERM,
            "INT" => signal_hook::consts::SIGINT,
            "KILL" => signal_hook::consts::SIGKILL,
            other => anyhow::bail!("{}: signal {other:?} (TERM, INT or KILL)", Self::VAR),
        };
        let nth = nth
            .parse()
            .with_context(|| format!("{}={spec:?}: N", Self::VAR))?;
        let after = after
            .parse()
            .with_context(|| format!("{}={spec:?}: K", Self::VAR))?;
        Ok(Some(Self {
            signal,
            phase: phase.to_string(),
            nth,
            after,
            seen: 0,
            armed: None,
        }))
    }

    fn begin(&mut self, phase: &str) {
        if phase == self.phase {
            self.seen += 1;
            self.armed = (self.seen == self.nth).then_some(self.after);
        }
    }

    fn advance(&mut self) {
        match self.armed {
            Some(left) if left > 1 => self.armed = Some(left - 1),
            Some(_) => {
                self.armed = None;
                // A failed raise leaves the run going, which the test then reports.
                let _ = signal_hook::low_level::raise(self.signal);
            }
            None => {}
        }
    }

    fn end(&mut self) {
        self.armed = None;
    }
}

impl Reporter for CliReporter {
    fn line(&mut self, text: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| println!("{text}")),
            None => println!("{text}"),
        }
    }

    fn begin(&mut self, phase: &str, total: usize) {
        if let Some(f) = &mut self.fault {
            f.begin(phase);
        }
        if self.quiet {
            return;
        }
        let bar = indicatif::ProgressBar::new(total as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{prefix:>10} [{bar:30}] {pos}/{len} {elapsed_precise} (eta {eta})",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(phase.to_string());
        if bar.is_hidden() {
            self.plain = Some(PlainProgress::begin(phase, total, PLAIN_PROGRESS_EVERY));
        }
        self.bar = Some(bar);
    }

    fn advance(&mut self, done: usize) {
        if let Some(b) = &self.bar {
            b.set_position(done as u64);
        }
        if let Some(line) = self.plain.as_mut().and_then(|p| p.advance(done)) {
            eprintln!("{line}");
        }
        if let Some(f) = &mut self.fault {
            f.advance();
        }
    }

    fn end(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        self.plain = None;
        if let Some(f) = &mut self.fault {
            f.end();
        }
    }

    fn progress(&mut self, text: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
    }

    fn stop_requested(&self) -> Option<i32> {
        match self.stop.load(Ordering::Relaxed) {
            0 => None,
            signal => Some(signal as i32),
        }
    }
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "reference-trainer",
    version,
    about = "The T²PO reference trainer"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    Cpu,
    Cuda,
}

#[derive(Clone, Copy, ValueEnum)]
enum SplitArg {
    Train,
    Test,
}

#[derive(Clone, Copy, ValueEnum)]
enum Profile {
    Paper,
    Released,
}

/// Flags shared by the training commands.
#[derive(clap::Args, Clone)]
struct RunArgs {
    /// The environment (its shipped config, `reference-trainer/configs/<env>.toml`, unless
    /// --config is given).
    #[arg(long, value_enum, default_value = "search")]
    env: EnvKind,
    /// A TOML config (every key required; see the shipped ones).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override the config's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// The output folder (default: runs/<env>-seed<seed>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where the model runs (`cuda` needs a build with `--features cuda`).
    #[arg(long, value_enum, default_value = "cpu")]
    device: DeviceArg,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Train: the cold start (SFT on expert demonstrations, then rejection sampling), then T²PO
    /// RL, with held-out evaluation, checkpoints, metrics.jsonl, plots and a results table.
    Train {
        #[command(flatten)]
        run: RunArgs,
        /// Override the config's number of RL iterations.
        #[arg(long)]
        iterations: Option<usize>,
        /// Continue the run in --out from its latest checkpoint.
        #[arg(long)]
        resume: bool,
        /// Start from this Hugging Face checkpoint folder (Qwen3, Llama, Qwen2) or GGUF file
        /// instead of the random-initialised default.
        #[arg(long)]
        init: Option<PathBuf>,
        /// Skip the cold start (RL alone).
        #[arg(long)]
        no_cold_start: bool,
        /// Skip RL (the cold start alone; same as `rft`).
        #[arg(long)]
        no_rl: bool,
        /// Keep the evaluation before RL in this folder, and take it from there when a run
        /// evaluated the same weights with the same program and settings before (e.g. several
        /// RL recipes from one --init); `ablate` keeps one per ablation.
        #[arg(long, value_name = "DIR")]
        eval_cache: Option<PathBuf>,
    },
    /// The cold start alone: SFT on the experts' demonstrations and rejection-sampling
    /// fine-tuning; writes OUT/cold-start (a Hugging Face checkpoint) and its evaluation.
    Rft {
        #[command(flatten)]
        run: RunArgs,
        /// Start from this Hugging Face checkpoint folder (Qwen3, Llama, Qwen2) or GGUF file
        /// instead of the random-initialised default.
        #[arg(long)]
        init: Option<PathBuf>,
    },
    /// Convert a llama.cpp GGUF file (Llama, Qwen2, Qwen3; dequantised to f32) into a Hugging
    /// Face folder: config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
    /// generation_config.json.
    Convert {
        /// The GGUF file.
        gguf: PathBuf,
        /// The folder to write (created if missing).
        out: PathBuf,
    },
    /// Evaluate a checkpoint on an environment split: success, task score, think tokens/turn,
    /// turns/episode, TTI and TDS rates.
    Eval {
        /// The environment.
        #[arg(long, value_enum, default_value = "search")]
        env: EnvKind,
        /// A TOML config (rollout and control settings; default: the shipped one).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The checkpoint folder (e.g. runs/…/checkpoints/iter-000008 or runs/…/cold-start), a
        /// Hugging Face folder (Qwen3, Llama, Qwen2) or a GGUF file.
        #[arg(long)]
        checkpoint: PathBuf,
        /// `test` (held-out, the default) or `train`.
        #[arg(long, default_value = "test")]
        split: SplitArg,
        /// Tasks (default: the config's eval_tasks).
        #[arg(long)]
        tasks: Option<usize>,
        /// Episodes per task (default: the config's eval_episodes).
        #[arg(long)]
        episodes: Option<usize>,
        /// Override the config's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Where the model runs.
        #[arg(long, value_enum, default_value = "cpu")]
        device: DeviceArg,
        /// Print the whole summary as JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The paper's comparison at small scale: T²PO, GiGPO, GRPO, T²PO −TTI, T²PO −TDS with the
    /// same budget from the same cold start, over several seeds; prints a markdown table.
    Ablate {
        #[command(flatten)]
        run: RunArgs,
        /// Override the config's number of RL iterations (per arm).
        #[arg(long)]
        iterations: Option<usize>,
        /// Seeds (the config's seed, +1, +2, …).
        #[arg(long, default_value_t = 3)]
        seeds: usize,
        /// The arms, comma-separated (default: T2PO, GiGPO, GRPO, T2PO-TTI, T2PO-TDS; also
        /// GiGPO-budget, GiGPO-void-filter, T2PO-entropy-only, T2PO-confidence-only, DAPO,
        /// T2PO-RFT, GiGPO-length-reward, T2PO-peak-cut, T2PO-calibrated).
        #[arg(long, value_delimiter = ',')]
        arms: Vec<String>,
        /// Runs at a time, each on an equal share of the threads (RAYON_NUM_THREADS, else
        /// every core; at least one each): after the first seed's cold start, the other seeds'
        /// cold starts, then each seed's arms once its cold start is done. With the same
        /// threads per run the table is the one the runs give one after another; their lines
        /// come with the seed and run in front, their progress once a minute on stderr.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
        jobs: u64,
    },
    /// Sample episodes from the embedded default model (or a checkpoint) and print each turn:
    /// think length, M_t summary, whether and why TTI fired, TDS tries, the action, the reward.
    Generate {
        /// The environment.
        #[arg(long, value_enum, default_value = "search")]
        env: EnvKind,
        /// A Hugging Face checkpoint folder (config.json, safetensors, tokenizer.json) or a GGUF
        /// file. A training run's checkpoint (`RUN/checkpoints/iter-NNNNNN`, or its exported
        /// `RUN/cold-start`) runs with its run's config: the run's environment and world, caps,
        /// TTI/TDS settings (calibrated ones included), with the switches below on top.
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// The task index in the held-out split.
        #[arg(long, default_value_t = 0)]
        task: usize,
        /// Episodes of that task to sample (one batch).
        #[arg(long, default_value_t = 2)]
        episodes: usize,
        /// Seed of the sampling (and of the embedded default's weights and data; a training
        /// checkpoint keeps its run's world).
        #[arg(long, default_value_t = defaults::SEED)]
        seed: u64,
        /// Rules of the control kernel.
        #[arg(long, value_enum, default_value = "paper")]
        profile: Profile,
        /// Turn TTI off.
        #[arg(long)]
        no_tti: bool,
        /// Turn TDS off.
        #[arg(long)]
        no_tds: bool,
        /// The hard-thinking-budget baseline (only L_max cuts thinking).
        #[arg(long)]
        hard_budget: bool,
        /// Response cap in tokens (default: the embedded default's per-env cap).
        #[arg(long)]
        max_response: Option<usize>,
        /// Turn limit (default: the environment's).
        #[arg(long)]
        max_turns: Option<usize>,
        /// Sampling temperature.
        #[arg(long, default_value_t = 1.0)]
        temperature: f32,
        /// Write the episode records here as JSON lines.
        #[arg(long)]
        jsonl: Option<PathBuf>,
        /// Print each turn's whole response text too (thought, forced tokens and action, special
        /// tokens included): what the policy thought before the action it took.
        #[arg(long)]
        text: bool,
        /// Where the model runs (`cuda` needs a build with `--features cuda`).
        #[arg(long, value_enum, default_value = "cpu")]
        device: DeviceArg,
    },
}

fn main() {
    reference_trainer::tune_allocator();
    if let Err(e) = run() {
        if let Some(reference_trainer::Error::Interrupted { signal, .. }) = e.downcast_ref() {
            // What a shell reports for a process its signal ended: 130 SIGINT, 143 SIGTERM.
            eprintln!("{e}");
            std::process::exit(128 + signal);
        }
        eprintln!("error: {}", chain(&e));
        std::process::exit(1);
    }
}

/// The error and its causes joined by `: `, leaving out a cause whose text the message already
/// holds (many errors print their source in their own message: `{e:#}` would repeat it).
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn device_of(d: DeviceArg) -> Result<Device> {
    Ok(match d {
        DeviceArg::Cpu => Device::Cpu,
        DeviceArg::Cuda => Device::new_cuda(0)
            .context("--device cuda (a build with `--features cuda` and a GPU)")?,
    })
}

/// Whether `--env` was on the command line (not just its default).
fn env_given() -> bool {
    std::env::args().any(|a| a == "--env" || a.starts_with("--env="))
}

/// The config of the training run a checkpoint folder comes from: an RL checkpoint's
/// `trainer_state.json` (the folder's files checked against their recorded checksums first) or
/// the exported cold start's `run_config.toml`; `None` for any other folder. An `--env` given on
/// the command line must be the run's.
fn run_config_of(dir: &std::path::Path, env: EnvKind) -> Result<Option<TrainConfig>> {
    let state_path = dir.join("trainer_state.json");
    let cfg = if state_path.is_file() {
        let (state, verified) = reference_trainer::train::state::verify(dir)?;
        if !verified {
            eprintln!("{}", reference_trainer::train::state::unverified_note(dir));
        }
        TrainConfig::parse(&state.config, &state_path)?
    } else if dir.join(RUN_CONFIG).is_file() {
        TrainConfig::load(&dir.join(RUN_CONFIG))?
    } else {
        return Ok(None);
    };
    if cfg.env != env && env_given() {
        anyhow::bail!(
            "--env {} but {} was trained on {}",
            env.as_str(),
            dir.display(),
            cfg.env.as_str()
        );
    }
    Ok(Some(cfg))
}

/// Whether `--profile` was on the command line (not just its default).
fn profile_given() -> bool {
    std::env::args().any(|a| a == "--profile" || a.starts_with("--profile="))
}

fn config_of(run: &RunArgs, iterations: Option<usize>) -> Result<TrainConfig> {
    let mut cfg = match &run.config {
        Some(path) => {
            let cfg = TrainConfig::load(path)?;
            if cfg.env != run.env && env_given() {
                anyhow::bail!(
                    "--env {} but {} is a config for {}",
                    run.env.as_str(),
                    path.display(),
                    cfg.env.as_str()
                );
            }
            cfg
        }
        None => TrainConfig::default_for(run.env)?,
    };
    if let Some(s) = run.seed {
        cfg.seed = s;
    }
    if let Some(n) = iterations {
        cfg.train.iterations = n;
    }
    cfg.validate(std::path::Path::new("<command line>"))?;
    Ok(cfg)
}

fn out_of(run: &RunArgs, cfg: &TrainConfig, what: &str) -> PathBuf {
    run.out.clone().unwrap_or_else(|| {
        PathBuf::from("runs").join(format!("{}{what}-seed{}", cfg.env.as_str(), cfg.seed))
    })
}

fn finish(result: &RunResult, cfg: &TrainConfig) {
    println!();
    print!(
        "{}",
        reference_trainer::train::run::results_table(
            cfg,
            result.before.as_ref(),
            result.after.as_ref()
        )
    );
    println!();
    println!(
        "{}",
        reference_trainer::train::run::kernels_line(result.kernels)
    );
    println!();
    if let Some(v) = reference_trainer::train::run::verdict(
        result.before.as_ref(),
        result.after.as_ref(),
        result.iterations,
    ) {
        println!("{v}");
        println!();
    }
    println!(
        "the whole run took {:.1} s ({} RL iterations); metrics {}; table {}",
        result.seconds,
        result.iterations,
        result.metrics.display(),
        result.results.display()
    );
    if let Some(c) = &result.checkpoint {
        println!("checkpoint {}", c.display());
    }
    for p in &result.plots {
        println!("plot {}", p.display());
    }
}

fn run() -> Result<()> {
    match Cli::parse().command {
        Command::Train {
            run,
            iterations,
            resume,
            init,
            no_cold_start,
            no_rl,
            eval_cache,
        } => {
            let cfg = config_of(&run, iterations)?;
            let out = out_of(&run, &cfg, "");
            let mut rep = CliReporter::new(run.quiet).stop_on_signals()?;
            let result = train(
                cfg.clone(),
                &RunOptions {
                    out,
                    resume,
                    explicit_config: run.config.is_some() || run.seed.is_some(),
                    iterations_given: iterations.is_some(),
                    init,
                    device: device_of(run.device)?,
                    cold_start: !no_cold_start,
                    rl: !no_rl,
                    eval_cache,
                },
                &mut rep,
            )?;
            finish(&result, &cfg);
            Ok(())
        }
        Command::Rft { run, init } => {
            let cfg = config_of(&run, None)?;
            let out = out_of(&run, &cfg, "-rft");
            let mut rep = CliReporter::new(run.quiet);
            let result = train(
                cfg.clone(),
                &RunOptions {
                    out: out.clone(),
                    resume: false,
                    explicit_config: true,
                    iterations_given: false,
                    init,
                    device: device_of(run.device)?,
                    cold_start: true,
                    rl: false,
                    eval_cache: None,
                },
                &mut rep,
            )?;
            finish(&result, &cfg);
            println!("cold-start policy {}", out.join("cold-start").display());
            Ok(())
        }
        Command::Convert { gguf, out } => {
            reference_trainer::gguf::convert(&gguf, &out)?;
            println!("{} → {}", gguf.display(), out.display());
            Ok(())
        }
        Command::Eval {
            env,
            config,
            checkpoint: ckpt,
            split,
            tasks,
            episodes,
            seed,
            device,
            json,
        } => {
            let is_gguf = reference_trainer::gguf::is_gguf(&ckpt);
            if !ckpt.exists() {
                anyhow::bail!("--checkpoint {}: no such file or folder", ckpt.display());
            }
            if !is_gguf && !ckpt.join(checkpoint::CONFIG).is_file() {
                anyhow::bail!(
                    "--checkpoint {}: neither a checkpoint folder (no {} in it) nor a GGUF file; \
                     a training run keeps its checkpoints in RUN/checkpoints/iter-NNNNNN and \
                     RUN/cold-start",
                    ckpt.display(),
                    checkpoint::CONFIG
                );
            }
            // A training run's checkpoint carries its run's config: evaluated with it, it
            // reproduces the run's own held-out numbers.
            let run_cfg = if is_gguf {
                None
            } else {
                run_config_of(&ckpt, env)?
            };
            let mut cfg = match (&config, run_cfg) {
                (Some(p), _) => TrainConfig::load(p)?,
                (None, Some(cfg)) => cfg,
                (None, None) => TrainConfig::default_for(env)?,
            };
            if let Some(s) = seed {
                cfg.seed = s;
            }
            if let Some(t) = tasks {
                cfg.train.eval_tasks = t;
            }
            if let Some(e) = episodes {
                cfg.train.eval_episodes = e;
            }
            cfg.validate(std::path::Path::new("<command line>"))?;
            let device = device_of(device)?;
            let (model, tok) = if is_gguf {
                reference_trainer::gguf::load(&ckpt, DType::F32, &device)?
            } else {
                let model = checkpoint::load(&ckpt, DType::F32, &device)?;
                (model, Tokenizer::load(ckpt.join("tokenizer.json"))?)
            };
            let (model, tok) = control_tags_added(model, tok)?;
            let pool = reference_trainer::train::run::pool_for(&cfg)?;
            let mut rep = CliReporter::new(false);
            let split = match split {
                SplitArg::Train => Split::Train,
                SplitArg::Test => Split::Test,
            };
            let s = reference_trainer::train::run::evaluate_on(
                &model, &tok, &pool, &cfg, split, &mut rep,
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
                return Ok(());
            }
            let how = if cfg.train.eval_temperature == 0.0 {
                "greedy".to_string()
            } else {
                format!("T = {}", cfg.train.eval_temperature)
            };
            println!(
                "| {} ({:?}, {} episodes, {how}) | success rate | task score | format-valid turns | think tokens/turn | turns/episode | TTI fire rate | TDS resample rate |\n|---|---|---|---|---|---|---|---|\n| {} | {:.3} | {:.3} | {:.3} | {:.1} | {:.2} | {:.3} | {:.3} |",
                cfg.env.as_str(),
                split,
                s.episodes,
                ckpt.display(),
                s.success_rate,
                s.score,
                s.format_valid_rate,
                s.think_tokens_per_turn,
                s.turns_per_episode,
                s.tti_fire_rate,
                s.tds_resample_rate
            );
            let label = ckpt.display().to_string();
            if let Some(t) = reference_trainer::train::run::by_source_table(
                "success by source",
                &[(label.as_str(), &s)],
            ) {
                print!("\n{t}");
            }
            Ok(())
        }
        Command::Ablate {
            run,
            iterations,
            seeds,
            arms,
            jobs,
        } => {
            use reference_trainer::train::ablate::Variant;
            let variants = if arms.is_empty() {
                Variant::DEFAULT.to_vec()
            } else {
                arms.iter()
                    .map(|a| Variant::from_name(a))
                    .collect::<Result<Vec<_>, _>>()?
            };
            let cfg = config_of(&run, iterations)?;
            let out = run.out.clone().unwrap_or_else(|| {
                PathBuf::from("runs").join(format!("ablate-{}", cfg.env.as_str()))
            });
            let seeds: Vec<u64> = (0..seeds as u64).map(|i| cfg.seed + i).collect();
            let mut rep = CliReporter::new(run.quiet).stop_on_signals()?;
            let result = reference_trainer::train::ablate::ablate(
                &cfg,
                &variants,
                &seeds,
                jobs as usize,
                &out,
                &device_of(run.device)?,
                &mut rep,
            );
            let (_, table) = match result {
                // Every arm (and cold start) resumes from its own folder: the same command
                // goes on, not `train --resume` on the one folder the error names.
                Err(reference_trainer::Error::Interrupted {
                    signal, out: at, ..
                }) => {
                    eprintln!(
                        "stopped by {} at a safe point (in {}); to continue, run the same \
                         `ablate` command: every run under {} resumes from its latest checkpoint",
                        reference_trainer::error::signal_name(signal),
                        at.display(),
                        out.display()
                    );
                    std::process::exit(128 + signal);
                }
                r => r?,
            };
            println!();
            println!("{table}");
            println!(
                "written to {} (curves: {})",
                out.join("ablation.md").display(),
                out.join("ablation_success.png").display()
            );
            Ok(())
        }
        Command::Generate {
            env,
            checkpoint: ckpt,
            task,
            episodes,
            seed,
            profile,
            no_tti,
            no_tds,
            hard_budget,
            max_response,
            max_turns,
            temperature,
            jsonl,
            text,
            device,
        } => {
            let device = match device {
                DeviceArg::Cpu => Device::Cpu,
                DeviceArg::Cuda => Device::new_cuda(0)
                    .context("--device cuda (a build with `--features cuda` and a GPU)")?,
            };
            // A training run's checkpoint carries its run's config: its episodes are generated
            // as the run's own rollouts were (its world, caps and control settings), with the
            // switches below applied on top and --seed seeding the sampling only.
            let mut run_cfg = None;
            let (model, tokenizer) = match &ckpt {
                Some(file) if reference_trainer::gguf::is_gguf(file) => {
                    let (model, tok) = reference_trainer::gguf::load(file, DType::F32, &device)?;
                    control_tags_added(model, tok)?
                }
                Some(dir) => {
                    run_cfg = run_config_of(dir, env)?;
                    let model = checkpoint::load(dir, DType::F32, &device)?;
                    let tok = Tokenizer::load(dir.join("tokenizer.json"))?;
                    control_tags_added(model, tok)?
                }
                None => {
                    let tok = defaults::tokenizer(seed)?;
                    (defaults::model(&tok, seed, &device)?, tok)
                }
            };
            let env = run_cfg.as_ref().map_or(env, |c| c.env);
            let pool = match &run_cfg {
                Some(cfg) => reference_trainer::train::run::pool_for(cfg)?,
                None => EnvPool::generated(env, seed, defaults::pool_size(env)?)
                    .with_context(|| format!("building the {env:?} environments"))?,
            };
            let n_tasks = pool.num_tasks(Split::Test);
            if task >= n_tasks {
                anyhow::bail!(
                    "--task {task}: the held-out split has {n_tasks} tasks (0..{n_tasks})"
                );
            }
            if episodes == 0 {
                anyhow::bail!("--episodes must be at least 1");
            }
            let switches = ControlSwitches {
                tti: !no_tti,
                tds: !no_tds,
                profile: match profile {
                    Profile::Paper => ProfileName::Paper,
                    Profile::Released => ProfileName::Released,
                },
                hard_budget,
            };
            let cfg = match run_cfg {
                Some(mut c) => {
                    c.control.tti &= !no_tti;
                    c.control.tds &= !no_tds;
                    if hard_budget {
                        c.control.hard_budget = true;
                        c.control.trigger = None;
                        c.control.calibrate = false;
                    }
                    if profile_given() {
                        c.control.profile = switches.profile;
                    }
                    if let Some(m) = max_response {
                        c.rollout.max_response_tokens = m;
                    }
                    if let Some(t) = max_turns {
                        c.rollout.max_turns = t;
                    }
                    c.validate(std::path::Path::new("<command line>"))?;
                    c.rollout_config(&tokenizer.control_tokens()?, temperature, seed)?
                }
                None => RolloutConfig {
                    control: switches
                        .control_config_for(&tokenizer.control_tokens()?, env.response_tags())?,
                    mark_void: false,
                    sampling: SamplingParams {
                        temperature,
                        top_p: 1.0,
                    },
                    // A user's checkpoint gets the paper's caps (spec §5); the tiny default its own.
                    max_response_tokens: max_response.unwrap_or(if ckpt.is_some() {
                        defaults::paper_max_response_tokens(env)
                    } else {
                        defaults::max_response_tokens(env)
                    }),
                    max_prompt_tokens: if ckpt.is_some() {
                        defaults::PAPER_MAX_PROMPT_TOKENS
                    } else {
                        defaults::MAX_PROMPT_TOKENS
                    },
                    history_length: pool.history_length(),
                    max_turns: max_turns.unwrap_or(pool.max_turns()),
                    seed,
                },
            };
            let mut envs: Vec<_> = (0..episodes).map(|_| pool.make(Split::Test)).collect();
            let specs: Vec<EpisodeSpec> = (0..episodes)
                .map(|_| EpisodeSpec { task, group: 0 })
                .collect();
            let policy = PackedQwen3::new(&model)?;
            let (records, stats) =
                rollout(&policy, &tokenizer, &mut envs, &specs, &cfg, |_, _| {})?;
            let out = std::io::stdout();
            let mut out = out.lock();
            for rec in &records {
                // A closed stdout (`| head`) ends the listing quietly, as before; a response
                // the tokenizer cannot decode is an error.
                if let Err(e) = print_episode(&mut out, rec, text.then_some(&tokenizer)) {
                    if e.downcast_ref::<std::io::Error>().is_some() {
                        break;
                    }
                    return Err(e);
                }
            }
            writeln!(
                out,
                "{} generations, {} decoded tokens ({:.0} tok/s decode, {:.0} tok/s prefill)",
                stats.generations,
                stats.decoded_tokens,
                stats.decoded_tokens as f64 / stats.decode_seconds.max(1e-9),
                stats.prefill_tokens as f64 / stats.prefill_seconds.max(1e-9),
            )
            .ok();
            if let Some(path) = jsonl {
                let mut text = String::new();
                for rec in &records {
                    text.push_str(&serde_json::to_string(rec)?);
                    text.push('\n');
                }
                checkpoint::write_atomic(&path, text.as_bytes())?;
                writeln!(out, "records written to {}", path.display()).ok();
            }
            Ok(())
        }
    }
}

/// A user's model and tokenizer with the control tags they lack added, said on stderr.
fn control_tags_added(model: Qwen3, tok: Tokenizer) -> Result<(Qwen3, Tokenizer)> {
    let (model, tok, added) = reference_trainer::train::run::with_control_tags(model, tok)?;
    if !added.is_empty() {
        eprintln!(
            "added to the tokenizer (new embedding rows, the mean of the others): {}",
            added.join(" ")
        );
    }
    Ok((model, tok))
}

/// One episode as `generate` prints it; with `tokenizer`, each turn's response text as well.
fn print_episode(
    out: &mut impl Write,
    rec: &reference_trainer::rollout::EpisodeRecord,
    tokenizer: Option<&Tokenizer>,
) -> Result<()> {
    writeln!(
        out,
        "=== episode {} ({} task {}): {}",
        rec.episode, rec.env, rec.task, rec.task_text
    )?;
    for t in &rec.turns {
        let g = &t.generation;
        let m: Vec<f32> = g.signal.iter().flatten().copied().collect();
        let (mean, min, max) = if m.is_empty() {
            (0.0, 0.0, 0.0)
        } else {
            (
                m.iter().sum::<f32>() / m.len() as f32,
                m.iter().copied().fold(f32::INFINITY, f32::min),
                m.iter().copied().fold(f32::NEG_INFINITY, f32::max),
            )
        };
        let tti = match g.tti {
            Some(f) => format!("fired at t={} ({:?})", f.position, f.reason),
            None => "did not fire".into(),
        };
        writeln!(
            out,
            "turn {:>2}: {} tokens, think {}, M_t mean {:.3} [{:.3}, {:.3}], Φ {}, TTI {}, TDS tries {} (Γ {:.3}){}",
            t.turn,
            g.response_ids.len(),
            g.think_tokens,
            mean,
            min,
            max,
            g.phi.map_or("-".into(), |p| format!("{p:.4}")),
            tti,
            t.tds_tries,
            t.gamma,
            if g.truncated { ", cut at the cap" } else { "" },
        )?;
        if let Some(tok) = tokenizer {
            writeln!(out, "         text {:?}", tok.decode(&g.response_ids)?)?;
        }
        writeln!(
            out,
            "         action {:?} ({}), reward {}{}",
            t.action,
            if t.format_valid {
                "valid"
            } else {
                "invalid format"
            },
            t.reward,
            if t.done { ", done" } else { "" }
        )?;
    }
    writeln!(
        out,
        "--- success {}, score {:.3}, return {:.2}, {} turns, {} resamples",
        rec.success,
        rec.score,
        rec.total_reward,
        rec.num_turns(),
        rec.resamples
    )?;
    Ok(())
}
