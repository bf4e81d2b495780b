//! `t2po-envs play` as a user runs it: `--help`, out-of-range tasks, a closed stdout, and each
//! environment on files given by path (WebShop items files, Search QA questions with a corpus
//! or an index; ALFWorld's folder errors), with the index cache rebuilt when damaged.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use t2po_envs::search_qa::corpus::{write_corpus, write_questions, World};
use t2po_envs::webshop::data;
use t2po_envs::webshop::generate::generate_catalog;

const BIN: &str = env!("CARGO_BIN_EXE_t2po-envs");

fn run_in(cache: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("T2PO_CACHE", cache)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_and_out_of_range_tasks() {
    let cache = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| run_in(cache.path(), args);
    for (args, want) in [
        (&["play", "--help"][..], "alfworld"),
        (&["play", "webshop", "--help"], "--items"),
        (&["play", "alfworld", "-h"], "--games"),
        (&["play", "search", "--help"], "--corpus"),
    ] {
        let (code, out, _) = run(args);
        assert_eq!(code, 0, "{args:?}");
        assert!(out.contains(want), "{args:?}: {out}");
        assert!(args.len() == 2 || out.contains("--task"), "{args:?}: {out}");
    }
    // Past the last task: an error saying how many there are, not a wrap-around (or ten
    // million generated games).
    for (args, env) in [
        (&["play", "alfworld", "--task", "10000000"][..], "ALFWorld"),
        (
            &["play", "alfworld", "--split", "train", "--task", "3553"],
            "ALFWorld",
        ),
        (
            &["play", "webshop", "--products", "50", "--task", "100000"],
            "WebShop",
        ),
        (
            &["play", "search", "--passages", "300", "--task", "100000"],
            "Search QA",
        ),
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, 1, "{args:?}: {out}");
        assert!(
            err.contains(env) && err.contains("out of range") && err.contains("tasks (0.."),
            "{args:?}: {err}"
        );
    }
    // The last task is fine.
    let (code, out, err) = run(&[
        "play", "alfworld", "--split", "train", "--task", "3552", "--expert",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("done after"), "{out}");
    // Bad values are clap errors (exit 2).
    for args in [
        &["play", "webshop", "--task", "-1"][..],
        &["play", "webshop", "--items", "x.json"],
        &["play", "search", "--index", "idx"],
        &[
            "play",
            "search",
            "--questions",
            "q",
            "--index",
            "i",
            "--corpus",
            "c",
        ],
        &["play", "alfworld", "--split", "test"],
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
}

#[test]
fn a_closed_stdout_ends_quietly() {
    let cache = tempfile::tempdir().unwrap();
    for args in [
        &["play", "webshop", "--products", "300", "--expert"][..],
        &["play", "alfworld", "--expert"],
    ] {
        let mut child = Command::new(BIN)
            .args(args)
            .env("T2PO_CACHE", cache.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read a little, then close the pipe (`| head -c 10`).
        let mut head = [0u8; 10];
        child.stdout.take().unwrap().read_exact(&mut head).unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && err.trim().is_empty(),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn webshop_from_items_files() {
    let dir = tempfile::tempdir().unwrap();
    let gen = generate_catalog(5, 200);
    let asin =
        |g: &t2po_envs::webshop::generate::Generated| g.raw.asin.as_str().unwrap().to_string();
    let items = dir.path().join("items_shuffle.json");
    let ins = dir.path().join("items_ins_v2.json");
    let human = dir.path().join("items_human_ins.json");
    data::write_list(
        &items,
        &gen.iter().map(|g| g.raw.clone()).collect::<Vec<_>>(),
    )
    .unwrap();
    data::write_map(
        &ins,
        &gen.iter()
            .map(|g| (asin(g), g.ins.clone()))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    data::write_map(
        &human,
        &gen.iter()
            .map(|g| (asin(g), g.human.clone()))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let p = |x: &Path| x.display().to_string();
    let (items_s, ins_s, human_s) = (p(&items), p(&ins), p(&human));
    let base = [
        "play", "webshop", "--items", &items_s, "--ins", &ins_s, "--expert",
    ];
    let (code, out, err) = run_in(dir.path(), &base);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("won: true"), "{out}");
    let mut human_args = base.to_vec();
    human_args.extend(["--human", &human_s, "--goals", "human", "--task", "3"]);
    let (code, out, err) = run_in(dir.path(), &human_args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("done after"), "{out}");
    // Human goals without the human file; a broken items file named with its line.
    let mut no_human = base.to_vec();
    no_human.extend(["--goals", "human"]);
    let (code, _, err) = run_in(dir.path(), &no_human);
    assert!(code == 1 && err.contains("--human"), "{err}");
    std::fs::write(&items, "[{\"asin\": \"B0X\"},\n oops]").unwrap();
    let (code, _, err) = run_in(dir.path(), &base);
    assert!(
        code == 1 && err.contains(&items_s) && err.contains("line 2"),
        "{err}"
    );
}

#[test]
fn search_from_questions_with_a_corpus_or_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let world = World::generate(4, 400);
    let corpus = dir.path().join("wiki-18.jsonl");
    write_corpus(&corpus, &world.passages).unwrap();
    let questions = dir.path().join("test.jsonl");
    write_questions(&questions, &world.questions(4, 2)).unwrap();
    let (c, q) = (
        corpus.display().to_string(),
        questions.display().to_string(),
    );
    let args = [
        "play",
        "search",
        "--questions",
        &q,
        "--corpus",
        &c,
        "--expert",
        "--task",
        "1",
    ];
    let (code, out, err) = run_in(&cache, &args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("done after") && err.contains("indexing"),
        "{out}\n{err}"
    );
    // The second run opens the cached index.
    let (code, out2, err) = run_in(&cache, &args);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("indexing"), "{err}");
    assert_eq!(out, out2);
    // A damaged cache is rebuilt, not read (and not a panic).
    let folder = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("play-corpus")
        })
        .unwrap();
    for f in std::fs::read_dir(&folder).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "idx" || e == "store") {
            let mut bytes = std::fs::read(&f).unwrap();
            let n = bytes.len();
            bytes[n / 3] ^= 0xff;
            std::fs::write(&f, bytes).unwrap();
        }
    }
    let (code, out3, err) = run_in(&cache, &args);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("indexing"), "{err}");
    assert_eq!(out, out3);

    // A user's index folder: used as is; when damaged, an error naming it (and it stays).
    let idx = dir.path().join("idx");
    let i = idx.display().to_string();
    let (code, _, err) = run_in(&cache, &["index", "--corpus", &c, "--out", &i]);
    assert_eq!(code, 0, "{err}");
    let with_index = [
        "play",
        "search",
        "--questions",
        &q,
        "--index",
        &i,
        "--expert",
        "--task",
        "1",
    ];
    let (code, out4, err) = run_in(&cache, &with_index);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, out4);
    std::fs::remove_file(idx.join(t2po_envs::search_qa::retriever::COMPLETE_MARKER)).unwrap();
    let (code, _, err) = run_in(&cache, &with_index);
    assert!(code == 1 && err.contains(&i), "{err}");
    assert!(idx.exists());
    // Past the file's last question: out of range.
    let n = std::fs::read_to_string(&questions)
        .unwrap()
        .lines()
        .count()
        .to_string();
    let mut past = args.to_vec();
    let last = past.len() - 1;
    past[last] = &n;
    let (code, _, err) = run_in(&cache, &past);
    assert!(code == 1 && err.contains("out of range"), "{err}");
}

#[test]
fn alfworld_game_folder_errors_name_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("games");
    std::fs::create_dir(&empty).unwrap();
    let e = empty.display().to_string();
    let (code, _, err) = run_in(dir.path(), &["play", "alfworld", "--games", &e]);
    assert!(
        code == 1 && err.contains(&e) && err.contains("no game folder"),
        "{err}"
    );
    let missing = dir.path().join("nope").display().to_string();
    let (code, _, err) = run_in(dir.path(), &["play", "alfworld", "--games", &missing]);
    assert!(code == 1 && err.contains(&missing), "{err}");
    // A game whose PDDL does not parse: the file, the field and the byte offset.
    let game = empty.join("pick_and_place_simple-Apple-None-Shelf-1/trial_T1");
    std::fs::create_dir_all(&game).unwrap();
    let tw = game.join("game.tw-pddl");
    std::fs::write(
        &tw,
        r#"{"solvable": true, "pddl_problem": "(define (:init (a)))) "}"#,
    )
    .unwrap();
    std::fs::write(
        game.join("traj_data.json"),
        r#"{"task_type": "pick_and_place_simple"}"#,
    )
    .unwrap();
    let (code, _, err) = run_in(dir.path(), &["play", "alfworld", "--games", &e]);
    assert!(
        code == 1
            && err.contains(&format!(
                "{}: pddl_problem: unbalanced ')' at byte 20",
                tw.display()
            ))
            && err.matches("unbalanced").count() == 1,
        "{err}"
    );
    // Not JSON: the parser's message is said once, not once per cause in the chain.
    std::fs::remove_file(&tw).unwrap();
    std::fs::write(&tw, "{").unwrap();
    let (code, _, err) = run_in(dir.path(), &["play", "alfworld", "--games", &e]);
    assert!(
        code == 1
            && err.contains(&format!("{}: line 1", tw.display()))
            && err.matches("EOF while parsing").count() == 1,
        "{err}"
    );
}
