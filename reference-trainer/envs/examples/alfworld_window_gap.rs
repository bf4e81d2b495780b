//! How much of ALFWorld's expert a policy with the memory window P can imitate: the expert
//! decides from everything it has observed since the episode began, while the policy's prompt
//! (verl-agent's template) shows the task, the last P observations and actions, the current
//! observation and the admissible commands. This compares, at every state of episodes played by
//! a learner that follows the expert but takes a random admissible command with probability
//! `NOISE` (the states a DAgger round labels), the full expert's command with a *windowed*
//! expert's: the same expert started from the episode's first observation (the receptacles,
//! which the admissible `go to` commands also show) and fed only the last P observations before
//! the current one. It also plays the windowed expert alone: the success a policy that imitated
//! the expert perfectly from its prompt could reach this way.
//!
//! ```text
//! cargo run --release -p t2po-envs --example alfworld_window_gap -- [GAMES] [P] [NOISE] [TURNS]
//! ```
//!
//! Defaults: 500 generated training games, P = 2 (the paper's and the shipped config's), noise
//! 0.3, a 20-turn cap (the shipped config's).

use t2po_envs::alfworld::expert::AlfworldExpert;
use t2po_envs::alfworld::game::{generate_split, Split};
use t2po_envs::alfworld::AlfworldEnv;
use t2po_envs::rng::Rng;
use t2po_envs::{format_response, Env, Observation, WithExpert};

fn arg<T: std::str::FromStr>(i: usize, default: T) -> T {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// The windowed expert's command at state `k` of `seen` (the observations from the first).
fn windowed(fresh: &AlfworldExpert, seen: &[Observation], k: usize, p: usize) -> String {
    let mut w = fresh.clone();
    for o in &seen[k.saturating_sub(p)..k] {
        w.act(&o.text, &o.admissible);
    }
    w.act(&seen[k].text, &seen[k].admissible)
}

fn step(env: &mut AlfworldEnv, cmd: &str) -> (Observation, bool, bool) {
    let t = env.step(&env.project(&format_response("", "action", cmd)));
    (t.observation, t.done, t.info.won)
}

fn main() {
    let games: usize = arg(1, 500);
    let p: usize = arg(2, 2);
    let noise: f64 = arg(3, 0.3);
    let turns: usize = arg(4, 20);
    let mut env = AlfworldEnv::new(generate_split(Split::Train, games, 2026)).expect("games");
    let mut rng = Rng::new(7);
    // (states, disagreements) on the expert's path (no random command yet) and off it.
    let (mut on, mut on_diff, mut off, mut off_diff) = (0usize, 0usize, 0usize, 0usize);
    let (mut learner_wins, mut full_wins, mut window_wins) = (0usize, 0usize, 0usize);
    for g in 0..games {
        // The learner: the full expert watching, a random admissible command now and then.
        let first = env.reset(g);
        let fresh = env.expert(0);
        let mut full = fresh.clone();
        let mut seen = vec![first];
        let mut deviated = false;
        for k in 0..turns {
            let label = full.act(&seen[k].text, &seen[k].admissible);
            let w = windowed(&fresh, &seen, k, p);
            let differs = usize::from(w != label);
            if deviated {
                off += 1;
                off_diff += differs;
            } else {
                on += 1;
                on_diff += differs;
            }
            let cmd = if rng.chance(noise) && !seen[k].admissible.is_empty() {
                let a = &seen[k].admissible;
                a[rng.below(a.len())].clone()
            } else {
                label.clone()
            };
            deviated |= cmd != label;
            let (o, done, won) = step(&mut env, &cmd);
            seen.push(o);
            if done {
                learner_wins += usize::from(won);
                break;
            }
        }
        // The full expert alone, and the windowed expert alone, within the same cap.
        for (windowed_only, wins) in [(false, &mut full_wins), (true, &mut window_wins)] {
            let first = env.reset(g);
            let mut full = env.expert(0);
            let fresh = full.clone();
            let mut seen = vec![first];
            for k in 0..turns {
                let cmd = if windowed_only {
                    windowed(&fresh, &seen, k, p)
                } else {
                    full.act(&seen[k].text, &seen[k].admissible)
                };
                let (o, done, won) = step(&mut env, &cmd);
                seen.push(o);
                if done {
                    *wins += usize::from(won);
                    break;
                }
            }
        }
    }
    let share = |d: usize, n: usize| d as f64 / n.max(1) as f64;
    println!("{games} generated training games, memory window P = {p}, {turns}-turn cap");
    println!(
        "learner (expert + {noise} random commands): states on the expert's path {on}, the windowed \
         expert's command differs in {:.3}; off it {off}, differs in {:.3}; learner wins {:.3}",
        share(on_diff, on),
        share(off_diff, off),
        share(learner_wins, games)
    );
    println!(
        "alone: full expert wins {:.3}, windowed expert wins {:.3}",
        share(full_wins, games),
        share(window_wins, games)
    );
}
