//! ALFWorld: the expert solves generated games of every task type within 50 steps with full,
//! strict-format responses; generated
//! games survive the real file format; a hand-written real-format game loads and plays; the
//! feedback and admissible lists match goldens for every action type.

use std::collections::BTreeMap;
use t2po_envs::alfworld::game::{
    generate_split, load_game_dir, load_split, write_game_dir, Game, GameLogic, Split,
};
use t2po_envs::alfworld::world::TaskType;
use t2po_envs::alfworld::AlfworldEnv;
use t2po_envs::{is_strict_format, run_expert_episode, Env, HistoryEntry, LoadError, ParseError};

/// Plays every game with the expert, checking that every response is a strict-format, valid
/// full response; returns (successes, games) per task type and the failures.
fn play_all(games: Vec<Game>) -> (BTreeMap<TaskType, (usize, usize)>, Vec<String>) {
    let mut env = AlfworldEnv::new(games).unwrap();
    let mut per: BTreeMap<TaskType, (usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    for i in 0..env.num_tasks() {
        let episode = run_expert_episode(&mut env, i, i as u64, None);
        for step in &episode.steps {
            assert!(step.action.valid, "{}", step.response);
            assert!(
                is_strict_format(&step.response, &["action"]),
                "{}",
                step.response
            );
        }
        assert!(episode.done);
        assert_eq!(episode.total_reward, if episode.won { 10.0 } else { 0.0 });
        let task = env.world().task.clone();
        let e = per.entry(task.kind).or_default();
        e.1 += 1;
        if episode.won {
            e.0 += 1;
        } else {
            failures.push(format!(
                "{} ({} steps): {}",
                env.game().name,
                episode.turns(),
                task.goal
            ));
        }
    }
    (per, failures)
}

#[test]
fn expert_solves_generated_games_per_task_type() {
    for (split, n) in [
        (Split::Train, 1500),
        (Split::ValidSeen, 140),
        (Split::ValidUnseen, 134),
    ] {
        let (per, failures) = play_all(generate_split(split, n, 17));
        for (kind, (ok, total)) in &per {
            let rate = *ok as f64 / *total as f64;
            println!(
                "{} {}: {ok}/{total} = {rate:.3}",
                split.as_str(),
                kind.as_str()
            );
        }
        for f in failures.iter().take(5) {
            println!("  failed: {f}");
        }
        for (kind, (ok, total)) in &per {
            assert!(
                *ok as f64 / *total as f64 >= 0.99,
                "{} {}: {ok}/{total}",
                split.as_str(),
                kind.as_str()
            );
        }
        assert_eq!(
            per.len(),
            6,
            "every task type appears in {}",
            split.as_str()
        );
    }
}

/// A hand-written game in the real format: 11 cabinets (for "cabinet 10" < "cabinet 2"),
/// co-located stove burners, every appliance, a lamp, a receptacle object.
fn write_fixture(dir: &std::path::Path, grammar_put: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let mut objects = vec!["agent1 - agent".to_string()];
    let mut init = vec!["(atLocation agent1 loc_bar_0_bar_0_bar_0_bar_0)".to_string()];
    let rec = |id: &str,
               class: &str,
               loc: &str,
               openable: bool,
               objects: &mut Vec<String>,
               init: &mut Vec<String>| {
        objects.push(format!("{id} - receptacle"));
        init.push(format!("(receptacleType {id} {class}Type)"));
        init.push(format!("(receptacleAtLocation {id} {loc})"));
        if openable {
            init.push(format!("(openable {id})"));
        }
    };
    for k in 0..11 {
        let id =
            format!("Cabinet_bar__plus_{k:02}_dot_00_bar__plus_00_dot_50_bar__minus_02_dot_00");
        rec(
            &id,
            "Cabinet",
            &format!("loc_bar_cab{k}"),
            true,
            &mut objects,
            &mut init,
        );
    }
    rec(
        "CounterTop_bar__plus_00_dot_10",
        "CounterTop",
        "loc_bar_ct",
        false,
        &mut objects,
        &mut init,
    );
    rec(
        "Microwave_bar__plus_00_dot_20",
        "Microwave",
        "loc_bar_mw",
        true,
        &mut objects,
        &mut init,
    );
    rec(
        "Fridge_bar__plus_00_dot_30",
        "Fridge",
        "loc_bar_fr",
        true,
        &mut objects,
        &mut init,
    );
    rec(
        "SinkBasin_bar__plus_00_dot_40",
        "SinkBasin",
        "loc_bar_sb",
        false,
        &mut objects,
        &mut init,
    );
    rec(
        "SideTable_bar__plus_00_dot_50",
        "SideTable",
        "loc_bar_st",
        false,
        &mut objects,
        &mut init,
    );
    rec(
        "StoveBurner_bar__plus_01_dot_00",
        "StoveBurner",
        "loc_bar_stove",
        false,
        &mut objects,
        &mut init,
    );
    rec(
        "StoveBurner_bar__plus_02_dot_00",
        "StoveBurner",
        "loc_bar_stove",
        false,
        &mut objects,
        &mut init,
    );
    let mut classes: Vec<(String, bool)> = init
        .iter()
        .filter_map(|f| f.strip_prefix("(receptacleType "))
        .map(|f| {
            (
                f.split(' ')
                    .nth(1)
                    .unwrap()
                    .trim_end_matches("Type)")
                    .to_string(),
                true,
            )
        })
        .collect();
    let mut obj = |id: &str, class: &str, r: &str, loc: &str, extra: &[&str]| {
        objects.push(format!("{id} - object"));
        classes.push((class.to_string(), false));
        init.push(format!("(objectType {id} {class}Type)"));
        init.push(format!("(inReceptacle {id} {r})"));
        init.push(format!("(objectAtLocation {id} {loc})"));
        for f in extra {
            init.push(format!("({f} {id})"));
        }
    };
    obj(
        "Apple_bar__minus_00_dot_47",
        "Apple",
        "CounterTop_bar__plus_00_dot_10",
        "loc_bar_ct",
        &[
            "pickupable",
            "heatable",
            "coolable",
            "cleanable",
            "sliceable",
        ],
    );
    obj(
        "Knife_bar__plus_00_dot_11",
        "Knife",
        "CounterTop_bar__plus_00_dot_10",
        "loc_bar_ct",
        &["pickupable"],
    );
    obj(
        "Mug_bar__plus_00_dot_12",
        "Mug",
        "Cabinet_bar__plus_05_dot_00_bar__plus_00_dot_50_bar__minus_02_dot_00",
        "loc_bar_cab5",
        &["pickupable", "isReceptacleObject"],
    );
    obj(
        "Egg_bar__plus_00_dot_13",
        "Egg",
        "Fridge_bar__plus_00_dot_30",
        "loc_bar_fr",
        &["pickupable"],
    );
    obj(
        "DeskLamp_bar__plus_00_dot_14",
        "DeskLamp",
        "SideTable_bar__plus_00_dot_50",
        "loc_bar_st",
        &["toggleable"],
    );
    obj(
        "Pan_bar__plus_00_dot_15",
        "Pan",
        "StoveBurner_bar__plus_02_dot_00",
        "loc_bar_stove",
        &["pickupable", "isReceptacleObject"],
    );
    // The problem states canContain for the classes it uses (the engine's PutObject tests it).
    for (r, _) in classes.iter().filter(|c| c.1) {
        for (o, _) in classes.iter().filter(|c| !c.1) {
            if t2po_envs::alfworld::vocab::contains(r, o) {
                init.push(format!("(canContain {r}Type {o}Type)"));
            }
        }
    }
    let problem = format!(
        "(define (problem plan_trial_0)\n ; a comment\n (:domain alfred)\n (:objects {} )\n (:init {} )\n (:goal (exists (?r - receptacle) (and (inReceptacle ?o ?r))))\n)",
        objects.join(" "),
        init.join("\n  ")
    );
    let grammar = format!(
        "{{\"intro\": \"-= Welcome to TextWorld, ALFRED! =-\\n\\n#look.feedback#\\n\\nYour task is to: put a cool apple in sidetable.\", \"put\": \"{grammar_put}\"}}"
    );
    let tw = serde_json::json!({"pddl_domain": "(define (domain alfred))", "grammar": grammar, "pddl_problem": problem, "solvable": true});
    std::fs::write(dir.join("game.tw-pddl"), tw.to_string()).unwrap();
    let traj = serde_json::json!({
        "task_type": "pick_cool_then_place_in_recep",
        "pddl_params": {"object_target": "Apple", "parent_target": "SideTable", "toggle_target": "", "mrecep_target": "", "object_sliced": false},
        "scene": {"floor_plan": "FloorPlan12"},
        "turk_annotations": {"anns": [{"task_desc": "Chill an apple and put it on the side table."}]}
    });
    std::fs::write(dir.join("traj_data.json"), traj.to_string()).unwrap();
}

#[test]
fn real_format_fixture_loads_and_plays_with_golden_feedback() {
    let dir = tempfile::tempdir().unwrap();
    let game_dir = dir
        .path()
        .join("pick_cool_then_place_in_recep-Apple-None-SideTable-12/trial_T0001");
    write_fixture(&game_dir, "You move the {o} to the {r}.");
    let game = load_game_dir(&game_dir)
        .unwrap()
        .expect("kept by the filters");
    assert_eq!(game.floor_plan, 12);
    let mut env = AlfworldEnv::new(vec![game]).unwrap();
    let first = env.reset(0);
    let cabinets: Vec<String> = (1..=11).rev().map(|n| format!("a cabinet {n}")).collect();
    assert_eq!(
        first.text,
        format!(
            "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see {}, a countertop 1, a fridge 1, a microwave 1, a sidetable 1, a sinkbasin 1, a stoveburner 2, and a stoveburner 1.\n\nYour task is to: put a cool apple in sidetable.",
            cabinets.join(", ")
        )
    );
    let mut expected_start: Vec<String> = (1..=11).map(|n| format!("go to cabinet {n}")).collect();
    expected_start.extend(
        [
            "countertop 1",
            "fridge 1",
            "microwave 1",
            "sidetable 1",
            "sinkbasin 1",
            "stoveburner 1",
            "stoveburner 2",
        ]
        .iter()
        .map(|r| format!("go to {r}")),
    );
    expected_start.extend(["help".to_string(), "inventory".into(), "look".into()]);
    expected_start.sort();
    assert_eq!(first.admissible, expected_start);
    assert_eq!(
        &first.admissible[..3],
        ["go to cabinet 1", "go to cabinet 10", "go to cabinet 11"]
    );

    let script: &[(&str, &str)] = &[
        (
            "look",
            "You are in the middle of a room. Looking quickly around you, you see nothing.",
        ),
        ("inventory", "You are not carrying anything."),
        (
            "go to stoveburner 1",
            "You arrive at stoveburner 1. On the stoveburner 1, you see a pan 1.",
        ),
        ("go to stoveburner 2", "Nothing happens."),
        (
            "look",
            "You are facing the stoveburner 2, and stoveburner 1. Next to it, you see nothing.",
        ),
        (
            "examine stoveburner 2",
            "On the stoveburner 2, you see nothing.",
        ),
        // Only the held object can be examined (the engine's examineObject, see world.rs).
        ("examine pan 1", "Nothing happens."),
        (
            "go to countertop 1",
            "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a knife 1.",
        ),
        (
            "take knife 1 from countertop 1",
            "You pick up the knife 1 from the countertop 1.",
        ),
        ("take apple 1 from countertop 1", "Nothing happens."),
        (
            "slice apple 1 with knife 1",
            "You sliced the apple 1 with the knife 1.",
        ),
        // The apple is not held (the knife is): only the held object can be examined.
        ("examine apple 1", "Nothing happens."),
        (
            "move knife 1 to countertop 1",
            "You move the knife 1 to the countertop 1.",
        ),
        (
            "take apple 1 from countertop 1",
            "You pick up the apple 1 from the countertop 1.",
        ),
        ("inventory", "You are carrying: a apple 1."),
        (
            "go to microwave 1",
            "You arrive at microwave 1. The microwave 1 is closed.",
        ),
        (
            "heat apple 1 with microwave 1",
            "You heat the apple 1 using the microwave 1.",
        ),
        ("examine apple 1", "This is a hot sliced apple 1."),
        (
            "go to fridge 1",
            "You arrive at fridge 1. The fridge 1 is closed.",
        ),
        ("move apple 1 to fridge 1", "Nothing happens."),
        (
            "open fridge 1",
            "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1.",
        ),
        (
            "cool apple 1 with fridge 1",
            "You cool the apple 1 using the fridge 1.",
        ),
        ("examine apple 1", "This is a cool sliced apple 1."),
        ("close fridge 1", "You close the fridge 1."),
        (
            "go to sinkbasin 1",
            "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.",
        ),
        (
            "clean apple 1 with sinkbasin 1",
            "You clean the apple 1 using the sinkbasin 1.",
        ),
        (
            "examine apple 1",
            "This is a cool and clean sliced apple 1.",
        ),
        (
            "go to cabinet 6",
            "You arrive at cabinet 6. The cabinet 6 is closed.",
        ),
        (
            "open cabinet 6",
            "You open the cabinet 6. The cabinet 6 is open. In it, you see a mug 1.",
        ),
        ("examine mug 1", "Nothing happens."),
        (
            "take mug 1 from cabinet 6",
            "Nothing happens.", // hands are full with the apple
        ),
        (
            "look",
            "You are facing the cabinet 6. Next to it, you see nothing.",
        ),
        ("jump around", "Nothing happens."),
        (
            "go to sidetable 1",
            "You arrive at sidetable 1. On the sidetable 1, you see a desklamp 1.",
        ),
        ("examine desklamp 1", "Nothing happens."),
        ("use desklamp 1", "You turn on the desklamp 1."),
    ];
    for (cmd, want) in script {
        let t = env.step(&t2po_envs::Projected {
            action: cmd.to_string(),
            valid: true,
        });
        assert_eq!(t.observation.text, *want, "after `{cmd}`");
        assert!(!t.done);
    }
    // At the side table holding the cool apple: the admissible list, exactly.
    let adm = env.world().admissible();
    assert!(adm.contains(&"move apple 1 to sidetable 1".to_string()));
    assert!(adm.contains(&"use desklamp 1".to_string()));
    assert!(adm.contains(&"examine apple 1".to_string()));
    assert!(
        !adm.iter().any(|a| a.starts_with("take ")),
        "hands are full: {adm:?}"
    );
    assert!(!adm.contains(&"go to sidetable 1".to_string()));
    let t = env.step(&t2po_envs::Projected {
        action: "help".into(),
        valid: true,
    });
    assert!(t
        .observation
        .text
        .starts_with("Available commands:\n  look:"));
    assert!(t
        .observation
        .text
        .contains("\n  move (object) to (receptacle):  place an object in or on a receptacle\n"));
    assert_eq!(t.observation.text.lines().count(), 14);
    let t = env.step(&t2po_envs::Projected {
        action: "  move apple 1 to sidetable 1 ".into(),
        valid: true,
    });
    assert_eq!(
        t.observation.text,
        "You move the apple 1 to the sidetable 1."
    );
    assert!(t.done && t.info.won);
    assert_eq!(t.reward, 10.0);
}

#[test]
fn old_put_grammar_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let game_dir = dir
        .path()
        .join("pick_cool_then_place_in_recep-Apple-None-SideTable-12/trial_T1");
    write_fixture(&game_dir, "You put the {o} in/on the {r}.");
    let game = load_game_dir(&game_dir).unwrap().unwrap();
    let mut env = AlfworldEnv::new(vec![game]).unwrap();
    env.reset(0);
    for cmd in [
        "go to countertop 1",
        "take apple 1 from countertop 1",
        "go to sidetable 1",
    ] {
        env.step(&t2po_envs::Projected {
            action: cmd.into(),
            valid: true,
        });
    }
    assert!(env
        .world()
        .admissible()
        .contains(&"put apple 1 in/on sidetable 1".to_string()));
    let t = env.step(&t2po_envs::Projected {
        action: "put apple 1 in/on sidetable 1".into(),
        valid: true,
    });
    assert_eq!(
        t.observation.text,
        "You put the apple 1 in/on the sidetable 1."
    );
    assert!(!t.info.won, "the apple was never cooled");
    // Filters: movable / Sliced folders, unsolvable games and other task types are skipped.
    let movable = dir
        .path()
        .join("pick_and_place_with_movable_recep-Apple-Pan-SideTable-1/t");
    write_fixture(&movable, "You move the {o} to the {r}.");
    assert!(load_game_dir(&movable).unwrap().is_none());
    let unsolvable = dir.path().join("x/t");
    write_fixture(&unsolvable, "You move the {o} to the {r}.");
    let tw = std::fs::read_to_string(unsolvable.join("game.tw-pddl"))
        .unwrap()
        .replace("\"solvable\":true", "\"solvable\":false");
    std::fs::write(unsolvable.join("game.tw-pddl"), tw).unwrap();
    assert!(load_game_dir(&unsolvable).unwrap().is_none());
    assert_eq!(load_split(dir.path()).unwrap().len(), 1);
    // A broken file is an error that names it.
    std::fs::write(
        game_dir.join("game.tw-pddl"),
        "{\"solvable\": true, \"pddl_problem\": \"(define (problem\"}",
    )
    .unwrap();
    let err = format!("{:#}", load_game_dir(&game_dir).unwrap_err());
    assert!(
        err.contains("game.tw-pddl") && err.contains("unclosed"),
        "{err}"
    );
}

/// Replaces the fixture's `game.tw-pddl` with one holding `problem` as its `pddl_problem`.
fn write_problem(dir: &std::path::Path, problem: &str) -> std::path::PathBuf {
    let path = dir.join("game.tw-pddl");
    let tw = serde_json::json!({"grammar": "", "pddl_problem": problem, "solvable": true});
    std::fs::write(&path, tw.to_string()).unwrap();
    path
}

/// Every way a game folder can be broken gives its own `LoadError` variant, and the message
/// names the file and what is wrong with it (the byte offset for a PDDL syntax error).
#[test]
fn load_errors_are_typed_and_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let game_dir = dir
        .path()
        .join("pick_cool_then_place_in_recep-Apple-None-SideTable-12/trial_T2");
    write_fixture(&game_dir, "You move the {o} to the {r}.");
    let tw_path = game_dir.join("game.tw-pddl");

    // A missing game.tw-pddl: an I/O error on that file.
    let good = std::fs::read_to_string(&tw_path).unwrap();
    std::fs::remove_file(&tw_path).unwrap();
    let err = load_game_dir(&game_dir).unwrap_err();
    match &err {
        LoadError::Io {
            path,
            action,
            source,
        } => {
            assert_eq!(path, &tw_path);
            assert_eq!(*action, "read");
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected LoadError::Io, got {other:?}"),
    }
    assert_eq!(err.path(), tw_path);
    assert!(
        err.to_string().contains(&tw_path.display().to_string()),
        "{err}"
    );

    // Not JSON: where in the file.
    std::fs::write(&tw_path, "{\"solvable\": true,\n  oops}").unwrap();
    let err = load_game_dir(&game_dir).unwrap_err();
    match &err {
        LoadError::Json { path, line, .. } => {
            assert_eq!(path, &tw_path);
            assert_eq!(*line, 2);
        }
        other => panic!("expected LoadError::Json, got {other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with(&format!("{}: line 2", tw_path.display())),
        "{err}"
    );

    // No pddl_problem string.
    std::fs::write(&tw_path, "{\"solvable\": true, \"pddl_problem\": 3}").unwrap();
    let err = load_game_dir(&game_dir).unwrap_err();
    assert!(
        matches!(&err, LoadError::Game { path, reason }
        if path == &tw_path && reason.contains("pddl_problem")),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&tw_path.display().to_string()),
        "{err}"
    );

    // PDDL syntax errors, each with its byte offset.
    for (problem, expected, shown) in [
        (
            "(define (problem p) (:init (a b)))) ",
            ParseError::UnbalancedClose { offset: 34 },
            "unbalanced ')' at byte 34",
        ),
        (
            "(define (problem p)\n  (:init (a b)",
            ParseError::Unclosed { open: 2, offset: 0 },
            "2 unclosed '(' at the end (the outermost at byte 0)",
        ),
        ("  ; only a comment\n", ParseError::Empty, "no expression"),
        (
            "(define) (:init)",
            ParseError::SecondExpression { offset: 15 },
            "a second expression at byte 15",
        ),
        (
            "(define) init",
            ParseError::AtomOutsideList { offset: 9 },
            "an atom outside any list at byte 9",
        ),
    ] {
        write_problem(&game_dir, problem);
        let err = load_game_dir(&game_dir).unwrap_err();
        match &err {
            LoadError::Sexp { path, what, source } => {
                assert_eq!(path, &tw_path);
                assert_eq!(*what, "pddl_problem");
                assert_eq!(source, &expected, "{problem:?}");
            }
            other => panic!("{problem:?}: expected LoadError::Sexp, got {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            format!("{}: pddl_problem: {shown}", tw_path.display())
        );
        // The byte offset points at the offending byte of the text.
        if let Some(at) = expected.offset() {
            let byte = problem.as_bytes()[at];
            assert!(
                matches!(byte, b'(' | b')' | b'i'),
                "{problem:?} at {at}: {byte}"
            );
        }
    }

    // Parses, but is not a game: no :init, a receptacle without a location, no receptacle.
    for (problem, reason) in [
        ("(define (problem p) (:objects a))", "no :init"),
        (
            "(define (problem p) (:init (receptacleType Shelf_1 ShelfType)))",
            "receptacle Shelf_1 has no receptacleAtLocation",
        ),
        (
            "(define (problem p) (:init (atLocation agent1 loc_1)))",
            "no receptacle in :init",
        ),
    ] {
        write_problem(&game_dir, problem);
        let err = load_game_dir(&game_dir).unwrap_err();
        assert!(
            matches!(&err, LoadError::Game { path, reason: r } if path == &tw_path && r.contains(reason)),
            "{problem:?}: {err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("{}: ", tw_path.display())),
            "{err}"
        );
    }

    // The good file loads again; a broken traj_data.json is named as such.
    std::fs::write(&tw_path, &good).unwrap();
    assert!(load_game_dir(&game_dir).unwrap().is_some());
    let traj_path = game_dir.join("traj_data.json");
    std::fs::write(&traj_path, "[").unwrap();
    let err = load_game_dir(&game_dir).unwrap_err();
    assert!(
        matches!(&err, LoadError::Json { path, .. } if path == &traj_path),
        "{err:?}"
    );

    // load_split: a missing root is an I/O error naming it; a broken game folder under the
    // root is that folder's error.
    let missing = dir.path().join("no-such-split");
    let err = load_split(&missing).unwrap_err();
    assert!(
        matches!(&err, LoadError::Io { path, action: "read", .. } if path == &missing),
        "{err:?}"
    );
    let err = load_split(dir.path()).unwrap_err();
    assert_eq!(err.path(), traj_path);

    // write_game_dir: a folder that cannot be created (a file is in the way).
    let blocked = dir.path().join("a-file");
    std::fs::write(&blocked, "x").unwrap();
    let game = generate_split(Split::ValidSeen, 1, 4).remove(0);
    let target = blocked.join("game");
    let err = write_game_dir(&game, &target, &stand_in_logic()).unwrap_err();
    assert!(
        matches!(&err, LoadError::Io { path, action: "create", .. } if path == &target),
        "{err:?}"
    );
}

/// The rules of `alfred.twl2` the loader reads (task sentence, put verb, help), for the round
/// trip without the alfworld wheel; tests/alfworld_engine.rs writes with the wheel's files.
fn stand_in_logic() -> GameLogic {
    GameLogic {
        pddl_domain: "(define (domain alfred))\n".into(),
        grammar: [
            r#"        "task": [{"rhs": "Your task is to: UNKNOWN GOAL."}],"#,
            r#"        "PutObject.feedback": [{"rhs": "You move the {o.name} to the {r.name}."}],"#,
            r#"        "help.feedback": [{"rhs": "\nAvailable commands:\n  look: …"}]"#,
        ]
        .join("\n"),
    }
}

#[test]
fn generated_games_round_trip_through_the_real_format() {
    let dir = tempfile::tempdir().unwrap();
    let games = generate_split(Split::ValidUnseen, 60, 3);
    for (i, g) in games.iter().enumerate() {
        write_game_dir(
            g,
            &dir.path().join(format!("{}/trial_{i:03}", g.name)),
            &stand_in_logic(),
        )
        .unwrap();
    }
    let loaded = load_split(dir.path()).unwrap();
    assert_eq!(loaded.len(), games.len());
    for l in &loaded {
        let orig = games
            .iter()
            .find(|g| g.world.intro() == l.world.intro())
            .expect("same intro");
        assert_eq!(orig.world.admissible(), l.world.admissible());
        assert_eq!(orig.world.task, l.world.task);
    }
    let (per, failures) = play_all(loaded);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(per.values().map(|v| v.1).sum::<usize>(), 60);
}

#[test]
fn projection_and_prompts() {
    use t2po_envs::alfworld::{admissible_block, project, prompt};
    let p = project("<think>ok</think><action>Go To Cabinet 1</action>");
    assert_eq!((p.action.as_str(), p.valid), ("go to cabinet 1", true));
    let p = project("<action>look</action>");
    assert_eq!(
        (p.action.as_str(), p.valid),
        ("look", false),
        "no think block"
    );
    let p = project("<think>先看看</think><action>look</action>");
    assert!(!p.valid, "CJK");
    let p = project("I will just go to the fridge and open it right now");
    assert_eq!(
        (p.action.as_str(), p.valid),
        ("e fridge and open it right now", false)
    );
    assert_eq!(p.action.chars().count(), 30);
    let adm = vec!["go to cabinet 1".to_string(), "help".into(), "look".into()];
    assert_eq!(admissible_block(&adm), "'go to cabinet 1'\n 'look'");
    let first = prompt("put a apple in fridge", "INTRO", &adm, &[], 2);
    assert_eq!(
        first,
        "\nYou are an expert agent operating in the ALFRED Embodied Environment.\nYour current observation is: INTRO\nYour admissible actions of the current situation are: ['go to cabinet 1'\n 'look'].\n\nNow it's your turn to take an action.\nYou should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. \nOnce you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.\n"
    );
    let hist: Vec<HistoryEntry> = (1..=3)
        .map(|i| HistoryEntry {
            observation: format!("o{i}"),
            action: format!("a{i}"),
        })
        .collect();
    let later = prompt("put a apple in fridge", "NOW", &adm, &hist, 2);
    assert!(later.starts_with("\nYou are an expert agent operating in the ALFRED Embodied Environment. Your task is to: put a apple in fridge\nPrior to this step, you have already taken 3 step(s). Below are the most recent 2 observations and the corresponding actions you took: [Observation 2: 'o2', Action 2: 'a2']\n[Observation 3: 'o3', Action 3: 'a3']\nYou are now at step 4 and your current observation is: NOW\n"));
}

#[test]
fn expert_responses_state_the_sub_goal() {
    let mut env = AlfworldEnv::new(generate_split(Split::ValidSeen, 12, 4)).unwrap();
    for i in 0..env.num_tasks() {
        let episode = run_expert_episode(&mut env, i, 7, Some(2));
        let task = env.world().task.clone();
        let first = &episode.steps[0].response;
        // The first rationale states the task and the object to find first.
        assert!(first.contains(&task.goal), "{first}");
        assert!(first.contains(&task.object.to_lowercase()), "{first}");
        // The seed changes the wording, never the actions.
        let again = run_expert_episode(&mut env, i, 8, None);
        let actions =
            |e: &t2po_envs::Episode| e.steps.iter().map(|s| s.action.clone()).collect::<Vec<_>>();
        assert_eq!(actions(&episode), actions(&again));
        assert!(episode.steps.iter().all(|s| s
            .prompt
            .as_deref()
            .is_some_and(|p| p.contains("<action> </action>"))));
    }
}

#[test]
fn generated_splits_share_games() {
    let splits = AlfworldEnv::generated_splits(30, 10, Split::ValidSeen, 5).unwrap();
    assert_eq!(
        (splits.train.num_tasks(), splits.held_out.num_tasks()),
        (30, 10)
    );
    assert_eq!(
        (splits.train.max_turns(), splits.train.name()),
        (50, "alfworld")
    );
    // Train and valid_seen share floor plans; the held-out seed keeps the games apart.
    for h in splits.held_out.games().iter() {
        assert!(splits
            .train
            .games()
            .iter()
            .all(|t| t.world.intro() != h.world.intro() || t.world.task != h.world.task));
    }
    let a = splits.train.clone();
    assert!(std::sync::Arc::ptr_eq(a.games(), splits.train.games()));
    assert!(AlfworldEnv::generated_splits(1, 1, Split::Train, 5).is_err());
}
