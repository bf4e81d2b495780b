//! Training checkpoints: `OUT/checkpoints/iter-NNNNNN/` holds the policy in the Hugging Face
//! layout (`config.json`, `model.safetensors`, `tokenizer.json`, `tokenizer_config.json` — it
//! loads in `transformers` and in `generate --checkpoint`), the optimizer's moments
//! (`optimizer.safetensors`) and `trainer_state.json` (iteration, optimizer step, the config,
//! seed included). `OUT/checkpoints/latest` names the newest one.
//!
//! A checkpoint is written into a temporary folder, synced, and renamed into place; only then
//! does `latest` move (itself replaced atomically) and old checkpoints get pruned. A crash or a
//! failed write at any point (a full disk included) leaves the previous checkpoint and `latest`
//! as they were, and no half-written folder behind.
//!
//! `trainer_state.json` (format 2) records the size and SHA-256 of every other file of its
//! folder; [`load`] and [`verify`] check them, so a truncated, changed or deleted file is an
//! [`Error::CheckpointFile`] naming it, never silently different weights. Format 1 (before
//! checksums) is still read — a run written by an older build can be resumed — but nothing in
//! it can be checked: [`Loaded::verified`] says so and the callers print a note.
//!
//! The cold start (pretraining, SFT, each rejection round) checkpoints after each stage too,
//! as `cold-NNN-<stage>` with [`TrainerState::cold_start`] set; they are pruned once the first
//! RL checkpoint (`iter-000000`, the cold start done) exists.
//!
//! RNG state: every random draw of a run comes from a generator seeded by
//! `(seed, iteration, purpose)` ([`derive_seed`]), so the iteration *is* the generator state
//! and a resumed run draws exactly what an uninterrupted one would.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::optimizer::AdamW;
use super::rft::{FineTuneProgress, Stage};
use crate::error::{Error, FileProblem, Result};
use crate::model::{checkpoint, Qwen3};
use crate::tokenizer::Tokenizer;

/// The trainer's part of a checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Format version of this file.
    pub format: u32,
    /// RL iterations completed (0: the cold start is done, RL not begun).
    pub iteration: usize,
    /// Optimizer steps taken (also saved with the moments).
    pub optimizer_step: u64,
    /// The run's config, as TOML (its seed and `iteration` are the whole RNG state).
    pub config: String,
    /// Set on a checkpoint taken inside the cold start: the stage it follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start: Option<ColdStart>,
    /// Size and SHA-256 of every other file of the checkpoint folder, by name (filled in by
    /// [`save`]; empty in format 1).
    #[serde(default)]
    pub files: BTreeMap<String, FileSum>,
    /// SHA-256 of this file's own content, written without this field (filled in by
    /// [`save`]): an edit or a bit flip that still parses is an error naming the file, not a
    /// resume from another iteration or config. Absent in checkpoints written before it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_sha256: Option<String>,
}

impl TrainerState {
    /// The state of an RL checkpoint (iteration 0: the cold start is done, RL not begun).
    pub fn rl(iteration: usize, optimizer_step: u64, config: String) -> Self {
        Self {
            format: FORMAT,
            iteration,
            optimizer_step,
            config,
            cold_start: None,
            files: BTreeMap::new(),
            state_sha256: None,
        }
    }
}

/// Where a cold-start checkpoint stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColdStart {
    /// The last stage finished.
    pub done: Stage,
    /// The SFT's step count, which shapes the fine-tuning optimizer's schedule.
    pub sft_steps: u64,
    /// Lines of `metrics.jsonl` written when the checkpoint was (a resume drops the rest).
    pub metrics_lines: usize,
    /// Inside the SFT ([`Stage::SftPart`]): how far it had gone. Absent otherwise, and in
    /// checkpoints written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sft: Option<FineTuneProgress>,
}

/// The size and SHA-256 (lower-case hex) of one checkpoint file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSum {
    /// Its length in bytes.
    pub bytes: u64,
    /// SHA-256 of its bytes.
    pub sha256: String,
}

/// The current format of `trainer_state.json` (2: with [`TrainerState::files`]).
pub const FORMAT: u32 = 2;
/// The format before checksums, still read (unverified).
pub const FORMAT_UNVERIFIED: u32 = 1;
const STATE: &str = "trainer_state.json";
const OPTIMIZER: &str = "optimizer.safetensors";
const LATEST: &str = "latest";

/// A seed for one purpose at one iteration (SplitMix64 finaliser over the three parts).
pub fn derive_seed(seed: u64, iteration: u64, purpose: u64) -> u64 {
    let mut z = seed
        ^ iteration.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ purpose.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A loaded checkpoint.
pub struct Loaded {
    /// The policy.
    pub model: Qwen3,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// Optimizer moments by name, and the step count.
    pub optimizer: (std::collections::HashMap<String, Tensor>, u64),
    /// The trainer state.
    pub state: TrainerState,
    /// The folder it came from.
    pub dir: PathBuf,
    /// Whether its files were checked against their recorded SHA-256 (false for format 1,
    /// which recorded none).
    pub verified: bool,
}

/// The checkpoints folder of a run.
pub fn checkpoints_dir(out: &Path) -> PathBuf {
    out.join("checkpoints")
}

/// The newest checkpoint of the run in `out`, if any (what `latest` names).
pub fn latest(out: &Path) -> Result<Option<PathBuf>> {
    let path = checkpoints_dir(out).join(LATEST);
    match fs::read_to_string(&path) {
        Ok(name) => {
            let name = name.trim();
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                return Err(Error::invalid(
                    path.display().to_string(),
                    format!("{name:?} is not a checkpoint folder name"),
                ));
            }
            Ok(Some(checkpoints_dir(out).join(name)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Writes a checkpoint of iteration `state.iteration` (or of the cold-start stage
/// `state.cold_start`) and makes it the latest; keeps the newest `keep` checkpoints. Returns its
/// folder.
pub fn save(
    out: &Path,
    model: &Qwen3,
    tokenizer: &Tokenizer,
    opt: &AdamW,
    state: &TrainerState,
    keep: usize,
) -> Result<PathBuf> {
    save_reporting(out, model, tokenizer, opt, state, keep, &mut |_| {})
}

/// [`save`], telling `written` how many of the checkpoint's parts are written (model,
/// tokenizer, optimizer, checksums and state, then the rename: 5 in all).
pub fn save_reporting(
    out: &Path,
    model: &Qwen3,
    tokenizer: &Tokenizer,
    opt: &AdamW,
    state: &TrainerState,
    keep: usize,
    written: &mut dyn FnMut(usize),
) -> Result<PathBuf> {
    let root = checkpoints_dir(out);
    fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
    let name = folder_name(state);
    let tmp = root.join(format!(".tmp-{name}-{}", std::process::id()));
    let final_dir = root.join(&name);
    let result = (|| -> Result<()> {
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
        }
        fs::create_dir(&tmp).map_err(|e| Error::io(&tmp, e))?;
        checkpoint::save(model, &tmp, usize::MAX)?;
        written(1);
        tokenizer.save(&tmp)?;
        tokenizer.save_generation_config(&tmp)?;
        written(2);
        let (moments, step) = opt.state();
        let mut named: Vec<(&str, &Tensor)> =
            moments.iter().map(|(k, t)| (k.as_str(), t)).collect();
        named.sort_by_key(|(k, _)| *k);
        checkpoint::write_safetensors(&tmp.join(OPTIMIZER), &named)?;
        written(3);
        let mut st = state.clone();
        st.format = FORMAT;
        st.optimizer_step = step;
        st.files = file_sums(&tmp)?;
        st.state_sha256 = Some(state_digest(&st, &tmp.join(STATE))?);
        let text = serde_json::to_string_pretty(&st).map_err(|e| Error::Json {
            path: tmp.join(STATE),
            message: e.to_string(),
        })?;
        checkpoint::write_atomic(&tmp.join(STATE), text.as_bytes())?;
        written(4);
        if final_dir.exists() {
            // A checkpoint of the same iteration from an earlier attempt (a resumed run that
            // redoes it): replaced by the new one.
            fs::remove_dir_all(&final_dir).map_err(|e| Error::io(&final_dir, e))?;
        }
        fs::rename(&tmp, &final_dir).map_err(|e| Error::io(&final_dir, e))?;
        sync_dir(&root);
        checkpoint::write_atomic(&root.join(LATEST), name.as_bytes())?;
        written(5);
        Ok(())
    })();
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    prune(&root, keep, &name)?;
    Ok(final_dir)
}

/// `iter-NNNNNN`, or `cold-NNN-<stage>` for a cold-start stage (numbered so names sort in the
/// order the stages run).
fn folder_name(state: &TrainerState) -> String {
    match &state.cold_start {
        None => format!("iter-{:06}", state.iteration),
        Some(c) => match c.done {
            Stage::Pretrain => "cold-000-pretrain".into(),
            // Sorts after pretraining and before the finished SFT ("cold-001-s…").
            Stage::SftPart(steps) => format!("cold-001-{steps:09}-sft-steps"),
            Stage::Sft => "cold-001-sft".into(),
            Stage::Rejection(round) => format!("cold-{:03}-rejection-{}", round + 2, round + 1),
        },
    }
}

/// How the name of a checkpoint inside the SFT ends.
const SFT_PART_SUFFIX: &str = "-sft-steps";

/// Size and SHA-256 of every file in `dir` but `trainer_state.json`.
fn file_sums(dir: &Path) -> Result<BTreeMap<String, FileSum>> {
    let mut sums = BTreeMap::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == STATE || !entry.path().is_file() {
            continue;
        }
        let path = entry.path();
        let sum = file_sum(&path).map_err(|e| Error::io(&path, e))?;
        sums.insert(name, sum);
    }
    Ok(sums)
}

/// SHA-256 (lower-case hex) of `state` as [`save`] writes it, less its own checksum field.
fn state_digest(state: &TrainerState, path: &Path) -> Result<String> {
    let mut bare = state.clone();
    bare.state_sha256 = None;
    let text = serde_json::to_string_pretty(&bare).map_err(|e| Error::Json {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(hex(&Sha256::digest(text.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn file_sum(path: &Path) -> std::io::Result<FileSum> {
    let mut f = fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    let sha256 = hex(&hasher.finalize());
    Ok(FileSum { bytes, sha256 })
}

fn sync_dir(dir: &Path) {
    // Best effort: makes the rename durable on filesystems that need it.
    if let Ok(f) = fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

/// Removes all but the newest `keep` checkpoints (never `current`) and stale temp folders;
/// once an RL checkpoint exists, every cold-start stage checkpoint goes too.
fn prune(root: &Path, keep: usize, current: &str) -> Result<()> {
    let mut names: Vec<String> = Vec::new();
    for entry in fs::read_dir(root).map_err(|e| Error::io(root, e))? {
        let entry = entry.map_err(|e| Error::io(root, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".tmp-") {
            let _ = fs::remove_dir_all(entry.path());
        } else if (name.starts_with("iter-") || name.starts_with("cold-")) && entry.path().is_dir()
        {
            names.push(name);
        }
    }
    // "cold-…" sorts before "iter-…": the stages come first, a checkpoint inside the SFT
    // before the SFT's own.
    names.sort();
    let rl_begun = names.iter().any(|n| n.starts_with("iter-"));
    let excess = names.len().saturating_sub(keep.max(1));
    let inside_sft = |n: &str| n.ends_with(SFT_PART_SUFFIX);
    for (i, name) in names.iter().enumerate() {
        // A checkpoint inside the SFT is of no more use once a later stage has one.
        let passed = inside_sft(name) && names[i + 1..].iter().any(|n| !inside_sft(n));
        if name != current && (i < excess || passed || (rl_begun && name.starts_with("cold-"))) {
            let p = root.join(name);
            fs::remove_dir_all(&p).map_err(|e| Error::io(&p, e))?;
        }
    }
    Ok(())
}

/// Reads `trainer_state.json` of the checkpoint in `dir` (format 2, or 1 without checksums).
pub fn read_state(dir: &Path) -> Result<TrainerState> {
    let state_path = dir.join(STATE);
    let text = fs::read_to_string(&state_path).map_err(|e| Error::io(&state_path, e))?;
    let state: TrainerState = serde_json::from_str(&text).map_err(|e| Error::Json {
        path: state_path.clone(),
        message: e.to_string(),
    })?;
    if state.format != FORMAT && state.format != FORMAT_UNVERIFIED {
        return Err(Error::Json {
            path: state_path,
            message: format!(
                "format {} (this build reads {FORMAT}, and {FORMAT_UNVERIFIED} unverified)",
                state.format
            ),
        });
    }
    if let (FORMAT, Some(want)) = (state.format, &state.state_sha256) {
        let found = state_digest(&state, &state_path)?;
        if found != *want {
            return Err(Error::CheckpointFile {
                path: state_path,
                problem: FileProblem::Checksum {
                    expected: want.clone(),
                    found,
                },
            });
        }
    }
    Ok(state)
}

/// Checks every file `state` lists in `dir` against its recorded size and SHA-256; the first
/// that differs is an [`Error::CheckpointFile`] naming it. Returns whether anything was
/// checked (false for format 1, which recorded no checksums).
pub fn verify_files(dir: &Path, state: &TrainerState) -> Result<bool> {
    if state.format == FORMAT_UNVERIFIED {
        return Ok(false);
    }
    let bad = |path: PathBuf, problem| Err(Error::CheckpointFile { path, problem });
    if state.files.is_empty() {
        return bad(
            dir.join(STATE),
            FileProblem::Unreadable("format 2 but no file checksums in it".into()),
        );
    }
    for (name, want) in &state.files {
        let path = dir.join(name);
        if name.contains('/') || name.starts_with('.') {
            return bad(path, FileProblem::Unreadable("not a file name".into()));
        }
        let found = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return bad(path, FileProblem::Missing)
            }
            Err(e) => return bad(path, FileProblem::Unreadable(e.to_string())),
        };
        if found != want.bytes {
            return bad(
                path,
                FileProblem::Size {
                    expected: want.bytes,
                    found,
                },
            );
        }
        let got = match file_sum(&path) {
            Ok(s) => s,
            Err(e) => return bad(path, FileProblem::Unreadable(e.to_string())),
        };
        if got.sha256 != want.sha256 {
            return bad(
                path,
                FileProblem::Checksum {
                    expected: want.sha256.clone(),
                    found: got.sha256,
                },
            );
        }
    }
    Ok(true)
}

/// [`read_state`] and [`verify_files`]: a training checkpoint's state, its files checked.
/// Returns the state and whether it could be checked (format 1 could not).
pub fn verify(dir: &Path) -> Result<(TrainerState, bool)> {
    let state = read_state(dir)?;
    let verified = verify_files(dir, &state)?;
    Ok((state, verified))
}

/// [`verify`] when `dir` is a training checkpoint (it has `trainer_state.json`): for the
/// commands that load any Hugging Face folder (`--init`, `generate --checkpoint`). `Ok(None)`
/// for another folder; else whether its files could be checked.
pub fn verify_if_training_checkpoint(dir: &Path) -> Result<Option<bool>> {
    if !dir.join(STATE).is_file() {
        return Ok(None);
    }
    verify(dir).map(|(_, verified)| Some(verified))
}

/// The note a caller prints for an unverified (format 1) checkpoint.
pub fn unverified_note(dir: &Path) -> String {
    format!(
        "note: {} was written before checkpoints carried checksums (trainer_state.json format \
         {FORMAT_UNVERIFIED}): its files are loaded unverified",
        dir.display()
    )
}

/// Loads the checkpoint in `dir` (the model in `dtype` on `device`), its files checked first
/// ([`verify`]).
pub fn load(dir: &Path, dtype: DType, device: &Device) -> Result<Loaded> {
    let (state, verified) = verify(dir)?;
    let model = checkpoint::load(dir, dtype, device)?;
    let tokenizer = Tokenizer::load(dir.join("tokenizer.json"))?;
    let moments = checkpoint::read_safetensors(&dir.join(OPTIMIZER))?;
    Ok(Loaded {
        model,
        tokenizer,
        optimizer: (moments, state.optimizer_step),
        state,
        dir: dir.to_path_buf(),
        verified,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Qwen3Config;
    use crate::train::optimizer::AdamWConfig;

    #[test]
    fn derived_seeds_differ_by_iteration_and_purpose() {
        let a = derive_seed(1, 0, 0);
        assert_ne!(a, derive_seed(1, 1, 0));
        assert_ne!(a, derive_seed(1, 0, 1));
        assert_ne!(a, derive_seed(2, 0, 0));
        assert_eq!(a, derive_seed(1, 0, 0));
    }

    fn tiny_tokenizer() -> Tokenizer {
        let corpus: Vec<String> = (0..20)
            .map(|i| format!("<think>go {i}</think><action>look</action> the quick brown fox"))
            .collect();
        crate::tokenizer::build_default(corpus, 400).unwrap()
    }

    /// A tiny model, its tokenizer and an optimizer after one real step (so the moments exist).
    fn stepped() -> (Tokenizer, Qwen3, AdamW) {
        let tok = tiny_tokenizer();
        let cfg = Qwen3Config::small(tok.id_bound(), 16, 32, 1, 2, 1, 8, 64);
        let model = Qwen3::random(cfg, 1, DType::F32, &Device::Cpu).unwrap();
        let mut opt = AdamW::new(AdamWConfig::default()).unwrap();
        let demo = crate::train::Demo {
            prompt: vec![1, 2],
            response: vec![3, 4],
        };
        crate::train::sft_step(&model, &mut opt, &[demo], 1, 0.0).unwrap();
        (tok, model, opt)
    }

    #[test]
    fn save_load_round_trips_and_a_failed_save_keeps_the_last_good_one() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let (tok, model, opt) = stepped();
        let mut state = TrainerState::rl(1, 0, "x = 1".into());
        assert!(latest(out).unwrap().is_none());
        let first = save(out, &model, &tok, &opt, &state, 2).unwrap();
        assert_eq!(latest(out).unwrap().unwrap(), first);
        let l = load(&first, DType::F32, &Device::Cpu).unwrap();
        assert_eq!(l.state.optimizer_step, 1);
        assert_eq!(l.state.iteration, 1);
        assert_eq!(l.optimizer.0.len(), 2 * model.params().len());
        for (name, v) in model.params() {
            let a: Vec<f32> = v.flatten_all().unwrap().to_vec1().unwrap();
            let b: Vec<f32> = l.model.params()[name]
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            assert_eq!(a, b, "{name}");
        }
        assert_eq!(l.tokenizer.to_json().unwrap(), tok.to_json().unwrap());

        // The next save cannot create its temp folder (a file is in the way): an error, and
        // `latest` still names the first checkpoint, which still loads.
        state.iteration = 2;
        let blocker = checkpoints_dir(out).join(format!(".tmp-iter-000002-{}", std::process::id()));
        fs::write(&blocker, b"in the way").unwrap();
        // remove_dir_all on a file fails too: the error names the path.
        let e = save(out, &model, &tok, &opt, &state, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains(".tmp-iter-000002"), "{e}");
        assert_eq!(latest(out).unwrap().unwrap(), first);
        load(&first, DType::F32, &Device::Cpu).unwrap();
        fs::remove_file(&blocker).unwrap();

        // Pruning keeps the newest two.
        for it in 2..=4 {
            state.iteration = it;
            save(out, &model, &tok, &opt, &state, 2).unwrap();
        }
        let mut names: Vec<String> = fs::read_dir(checkpoints_dir(out))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["iter-000003", "iter-000004", "latest"]);
    }

    #[test]
    fn checkpoints_inside_the_sft_sort_between_its_stages_and_go_once_it_is_done() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let (tok, model, opt) = stepped();
        let cold = |done: Stage, sft: Option<FineTuneProgress>| TrainerState {
            cold_start: Some(ColdStart {
                done,
                sft_steps: 2000,
                metrics_lines: 1,
                sft,
            }),
            ..TrainerState::rl(0, 1, "x = 1".into())
        };
        let names = || {
            let mut n: Vec<String> = fs::read_dir(checkpoints_dir(out))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != LATEST)
                .collect();
            n.sort();
            n
        };
        save(out, &model, &tok, &opt, &cold(Stage::Pretrain, None), 10).unwrap();
        let progress = |steps: usize| FineTuneProgress {
            steps,
            rows: 8 * steps,
            tokens: 100 * steps,
            forward_tokens: 900 * steps,
            loss_sum: 0.1 + steps as f64 / 3.0,
            last_loss: 1.0 / 3.0,
            grad_norm: 0.7,
            lr: 2.5e-4,
            seconds: 12.5,
        };
        for steps in [400, 800, 1200] {
            let state = cold(Stage::SftPart(steps), Some(progress(steps)));
            save(out, &model, &tok, &opt, &state, 10).unwrap();
        }
        // The progress reads back exactly (the loss sum goes on from it).
        let l = load(&latest(out).unwrap().unwrap(), DType::F32, &Device::Cpu).unwrap();
        let c = l.state.cold_start.unwrap();
        assert_eq!(c.done, Stage::SftPart(1200));
        assert_eq!(c.sft, Some(progress(1200)));
        assert_eq!(
            names(),
            [
                "cold-000-pretrain",
                "cold-001-000000400-sft-steps",
                "cold-001-000000800-sft-steps",
                "cold-001-000001200-sft-steps",
            ]
        );
        // Kept to `keep` like any other: the oldest go first.
        let state = cold(Stage::SftPart(1600), Some(progress(1600)));
        save(out, &model, &tok, &opt, &state, 3).unwrap();
        assert_eq!(
            names(),
            [
                "cold-001-000000800-sft-steps",
                "cold-001-000001200-sft-steps",
                "cold-001-000001600-sft-steps",
            ]
        );
        // The SFT done: the checkpoints inside it are of no more use.
        save(out, &model, &tok, &opt, &cold(Stage::Sft, None), 3).unwrap();
        assert_eq!(names(), ["cold-001-sft"]);
    }

    #[test]
    fn a_checkpoint_of_another_architecture_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let tok = tiny_tokenizer();
        let cfg = Qwen3Config::small(tok.id_bound(), 16, 32, 1, 2, 1, 8, 64);
        let model = Qwen3::random(cfg, 1, DType::F32, &Device::Cpu).unwrap();
        let opt = AdamW::new(AdamWConfig::default()).unwrap();
        let state = TrainerState::rl(0, 0, String::new());
        let ck = save(out, &model, &tok, &opt, &state, 1).unwrap();
        let path = ck.join("config.json");
        let text = fs::read_to_string(&path).unwrap();
        // Qwen3, Llama and Qwen2 load; Mistral is not one of them.
        fs::write(
            &path,
            text.replace("Qwen3ForCausalLM", "MistralForCausalLM")
                .replace("\"qwen3\"", "\"mistral\""),
        )
        .unwrap();
        // The model loader's own check (the checkpoint's checksums would catch the edit first).
        let e = checkpoint::load(&ck, DType::F32, &Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("model_type") && e.contains("mistral") && e.contains("config.json"),
            "{e}"
        );
    }

    /// A checkpoint of a tiny model in `out`.
    fn saved(out: &Path) -> PathBuf {
        let (tok, model, opt) = stepped();
        save(
            out,
            &model,
            &tok,
            &opt,
            &TrainerState::rl(3, 0, "x = 1".into()),
            1,
        )
        .unwrap()
    }

    fn damaged(dir: &Path) -> (PathBuf, FileProblem) {
        match load(dir, DType::F32, &Device::Cpu) {
            Err(Error::CheckpointFile { path, problem }) => (path, problem),
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("a damaged checkpoint loaded"),
        }
    }

    #[test]
    fn every_file_is_checksummed_and_damage_is_an_error_naming_the_file() {
        let work = tempfile::tempdir().unwrap();
        let ck = saved(work.path());
        let (state, verified) = verify(&ck).unwrap();
        assert!(verified);
        assert_eq!(state.format, FORMAT);
        let mut listed: Vec<&str> = state.files.keys().map(String::as_str).collect();
        listed.sort();
        let mut on_disk: Vec<String> = fs::read_dir(&ck)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != STATE)
            .collect();
        on_disk.sort();
        assert_eq!(listed, on_disk);
        for name in [
            "model.safetensors",
            OPTIMIZER,
            "tokenizer.json",
            "config.json",
        ] {
            assert!(state.files.contains_key(name), "{name} listed");
        }
        let original = work.path().join("original");
        fs::create_dir(&original).unwrap();
        let copy_back = || {
            for name in state.files.keys() {
                fs::copy(original.join(name), ck.join(name)).unwrap();
            }
        };
        for name in state.files.keys() {
            fs::copy(ck.join(name), original.join(name)).unwrap();
        }

        // Truncated: the model's tensor file loses its last byte.
        let model = ck.join("model.safetensors");
        let bytes = fs::read(&model).unwrap();
        fs::write(&model, &bytes[..bytes.len() - 1]).unwrap();
        let (path, problem) = damaged(&ck);
        assert_eq!(path, model);
        let n = bytes.len() as u64;
        assert_eq!(
            problem,
            FileProblem::Size {
                expected: n,
                found: n - 1
            }
        );
        let text = Error::CheckpointFile {
            path: path.clone(),
            problem,
        }
        .to_string();
        assert!(
            text.contains("model.safetensors") && text.contains("damaged"),
            "{text}"
        );
        copy_back();
        load(&ck, DType::F32, &Device::Cpu).unwrap();

        // One bit flipped in the middle of a tensor, the size unchanged.
        let opt = ck.join(OPTIMIZER);
        let mut bytes = fs::read(&opt).unwrap();
        let mid = bytes.len() - 5;
        bytes[mid] ^= 0x10;
        fs::write(&opt, &bytes).unwrap();
        let (path, problem) = damaged(&ck);
        assert_eq!(path, opt);
        assert!(
            matches!(problem, FileProblem::Checksum { .. }),
            "{problem:?}"
        );
        copy_back();

        // The state itself edited so that it still parses (another iteration to resume from).
        let state_path = ck.join(STATE);
        let text = fs::read_to_string(&state_path).unwrap();
        let edited = text.replacen(
            &format!("\"iteration\": {}", state.iteration),
            &format!("\"iteration\": {}", state.iteration + 1),
            1,
        );
        assert_ne!(edited, text);
        fs::write(&state_path, &edited).unwrap();
        let (path, problem) = damaged(&ck);
        assert_eq!(path, state_path);
        assert!(
            matches!(problem, FileProblem::Checksum { .. }),
            "{problem:?}"
        );
        fs::write(&state_path, &text).unwrap();

        // A file deleted.
        let tok = ck.join("tokenizer.json");
        fs::remove_file(&tok).unwrap();
        assert_eq!(damaged(&ck), (tok, FileProblem::Missing));
        copy_back();
        assert!(verify(&ck).unwrap().1);
    }

    #[test]
    fn a_checkpoint_without_checksums_loads_unverified() {
        let work = tempfile::tempdir().unwrap();
        let ck = saved(work.path());
        let path = ck.join(STATE);
        let mut v: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        v["format"] = 1.into();
        v.as_object_mut().unwrap().remove("files");
        fs::write(&path, v.to_string()).unwrap();
        let l = load(&ck, DType::F32, &Device::Cpu).unwrap();
        assert!(!l.verified);
        assert_eq!(l.state.iteration, 3);
        assert!(unverified_note(&ck).contains("unverified"));
        // A format this build does not know is refused.
        v["format"] = 7.into();
        fs::write(&path, v.to_string()).unwrap();
        let e = load(&ck, DType::F32, &Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("format 7") && e.contains(STATE), "{e}");
        // Format 2 that lists no file is damaged, not unverified.
        v["format"] = 2.into();
        fs::write(&path, v.to_string()).unwrap();
        assert!(matches!(
            load(&ck, DType::F32, &Device::Cpu),
            Err(Error::CheckpointFile { .. })
        ));
    }
}
