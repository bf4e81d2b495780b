//! A checkpoint write that runs out of disk space, on a real full file system (a 4 MiB tmpfs
//! this test mounts): the error names the file it was writing and says ENOSPC, the previous
//! checkpoint and `latest` stay as they were and still verify, and no half-written folder is
//! left; with space freed the next write succeeds.
//!
//! Mounting needs root with CAP_SYS_ADMIN, so the test is `#[ignore]`d in a plain `cargo test`
//! (it never counts as passed where it could not run); `.ci/run`, which runs as root, asks for
//! it with `--ignored`, where a failed mount is a failure.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::{DType, Device};
use reference_trainer::model::{Qwen3, Qwen3Config};
use reference_trainer::train::state::{self, TrainerState};
use reference_trainer::train::{sft_step, AdamW, AdamWConfig, Demo};
use reference_trainer::Error;

/// A tmpfs of `size` mounted on a fresh folder, unmounted when dropped.
struct Tmpfs {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output()
            .expect("run mount(8)");
        assert!(
            out.status.success(),
            "mounting a tmpfs needs root with CAP_SYS_ADMIN: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { _dir: dir, path }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Writes zeros into `path` until the file system is full.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 << 10];
    loop {
        match f.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling the tmpfs: {e}"),
        }
    }
    // Page-sized leftovers too.
    while f.write_all(&[0u8; 512]).is_ok() {}
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
#[ignore = "needs root with CAP_SYS_ADMIN to mount a tmpfs: \
            cargo test -p reference-trainer --test full_disk -- --ignored (.ci/run runs it so)"]
fn a_checkpoint_write_on_a_full_disk_keeps_the_previous_checkpoint() {
    let fs = Tmpfs::mount("4m");
    let out = fs.path.join("run");
    let corpus: Vec<String> = (0..20)
        .map(|i| format!("<think>go {i}</think><action>look</action> the quick brown fox"))
        .collect();
    let tok = reference_trainer::tokenizer::build_default(corpus, 400).unwrap();
    let cfg = Qwen3Config::small(tok.id_bound(), 16, 32, 1, 2, 1, 8, 64);
    let model = Qwen3::random(cfg, 1, DType::F32, &Device::Cpu).unwrap();
    let mut opt = AdamW::new(AdamWConfig::default()).unwrap();
    let demo = Demo {
        prompt: vec![1, 2],
        response: vec![3, 4],
    };
    sft_step(&model, &mut opt, &[demo], 1, 0.0).unwrap();
    let first = state::save(
        &out,
        &model,
        &tok,
        &opt,
        &TrainerState::rl(1, 0, String::new()),
        3,
    )
    .unwrap();

    fill(&fs.path.join("filler"));
    let root = state::checkpoints_dir(&out);
    let e = state::save(
        &out,
        &model,
        &tok,
        &opt,
        &TrainerState::rl(2, 0, String::new()),
        3,
    )
    .unwrap_err();
    let text = e.to_string();
    match &e {
        Error::Io { path, source } => {
            assert_eq!(source.raw_os_error(), Some(28), "{text}");
            assert!(path.starts_with(&root), "the error names the file: {text}");
        }
        other => panic!("not an I/O error naming the file: {other}"),
    }
    assert!(
        text.contains("No space left on device") && text.contains(root.to_str().unwrap()),
        "{text}"
    );
    assert_eq!(state::latest(&out).unwrap(), Some(first.clone()));
    assert_eq!(
        names(&root),
        ["iter-000001", "latest"],
        "no half-written folder"
    );
    let (_, verified) = state::verify(&first).unwrap();
    assert!(verified);
    state::load(&first, DType::F32, &Device::Cpu).unwrap();

    std::fs::remove_file(fs.path.join("filler")).unwrap();
    let second = state::save(
        &out,
        &model,
        &tok,
        &opt,
        &TrainerState::rl(2, 0, String::new()),
        3,
    )
    .unwrap();
    assert_eq!(state::latest(&out).unwrap(), Some(second.clone()));
    assert!(state::verify(&second).unwrap().1);
}
