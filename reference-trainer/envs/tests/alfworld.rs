//! ALFWorld: the expert solves generated games of every task type within 50 steps; generated
//! games survive the real file format; a hand-written real-format game loads and plays; the
//! feedback and admissible lists match goldens for every action type.

use std::collections::BTreeMap;
use t2po_envs::alfworld::expert::AlfworldExpert;
use t2po_envs::alfworld::game::{generate_split, load_game_dir, load_split, write_game_dir, Game, Split};
use t2po_envs::alfworld::world::TaskType;
use t2po_envs::alfworld::AlfworldEnv;
use t2po_envs::{Env, HistoryEntry};

/// Plays every game with the expert; returns (successes, games) per task type and total steps.
fn play_all(games: Vec<Game>) -> (BTreeMap<TaskType, (usize, usize)>, usize, Vec<String>) {
    let mut env = AlfworldEnv::new(games).unwrap();
    let mut per: BTreeMap<TaskType, (usize, usize)> = BTreeMap::new();
    let mut steps = 0;
    let mut failures = Vec::new();
    for i in 0..env.num_tasks() {
        let first = env.reset(i);
        let task = env.world().task.clone();
        let mut expert = AlfworldExpert::new(&task, &first.text);
        let mut obs = first.text.clone();
        let mut adm = first.admissible.clone();
        let mut history: Vec<HistoryEntry> = Vec::new();
        let mut won = false;
        loop {
            let response = expert.respond(&obs, &adm);
            let action = env.project(&response);
            assert!(action.valid, "{response}");
            let t = env.step(&action);
            steps += 1;
            history.push(HistoryEntry { observation: obs.clone(), action: action.action.clone() });
            obs = t.observation.text;
            adm = t.observation.admissible;
            if t.done {
                won = t.info.won;
                assert_eq!(t.reward, if won { 10.0 } else { 0.0 });
                break;
            }
        }
        let e = per.entry(task.kind).or_default();
        e.1 += 1;
        if won {
            e.0 += 1;
        } else {
            failures.push(format!("{} ({} steps): {}", env.game().name, env.steps(), task.goal));
        }
    }
    (per, steps, failures)
}

#[test]
fn expert_solves_generated_games_per_task_type() {
    for (split, n) in [(Split::Train, 600), (Split::ValidSeen, 140), (Split::ValidUnseen, 134)] {
        let start = std::time::Instant::now();
        let (per, steps, failures) = play_all(generate_split(split, n, 17));
        let secs = start.elapsed().as_secs_f64();
        for (kind, (ok, total)) in &per {
            let rate = *ok as f64 / *total as f64;
            println!("{} {}: {ok}/{total} = {rate:.3}", split.as_str(), kind.as_str());
        }
        println!("{}: {steps} env steps in {secs:.2} s ({:.0} steps/s, expert included)", split.as_str(), steps as f64 / secs);
        for f in failures.iter().take(5) {
            println!("  failed: {f}");
        }
        for (kind, (ok, total)) in &per {
            assert!(*ok as f64 / *total as f64 >= 0.99, "{} {}: {ok}/{total}", split.as_str(), kind.as_str());
        }
        assert_eq!(per.len(), 6, "every task type appears in {}", split.as_str());
    }
}
