//! DAPO's dynamic sampling (Yu et al. 2025, §3.2; verl's `algorithm.filter_groups`): a group
//! whose episodes all earned the same total reward has zero advantage for every episode under
//! GRPO, so it adds rows that carry no gradient. Such groups are dropped and further batches of
//! tasks are rolled out until the iteration has `rollout.tasks_per_iteration` informative
//! groups; the last batch's extra groups are cut, as verl trims to the train batch size.
//!
//! One deliberate difference: verl raises an error when `max_num_gen_batches` batches did not
//! fill the batch; here the iteration trains on the groups it found (none at worst: the update
//! is then empty) and the metrics line says how many that was.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::rollout::EpisodeRecord;

/// What dynamic sampling did in one iteration (`metrics.jsonl`, `dynamic`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DynamicReport {
    /// Rollout batches drawn.
    pub batches: usize,
    /// Groups rolled out over those batches.
    pub groups_generated: usize,
    /// Groups with more than one total reward among them (before the cut).
    pub groups_informative: usize,
    /// Groups trained on (at most `rollout.tasks_per_iteration`).
    pub groups_kept: usize,
}

/// The groups of `records` (their `group` ids, ascending) whose episodes' total rewards are not
/// all equal.
pub fn informative_groups(records: &[EpisodeRecord]) -> Vec<usize> {
    let mut groups: Vec<usize> = records.iter().map(|r| r.group).collect();
    groups.sort_unstable();
    groups.dedup();
    groups
        .into_iter()
        .filter(|&g| {
            let mut rewards = records
                .iter()
                .filter(|r| r.group == g)
                .map(|r| r.total_reward);
            let first = rewards.next();
            rewards.any(|x| Some(x) != first)
        })
        .collect()
}

/// Rolls out batches with `roll(b)` (`b` = 0, 1, …; `None` when no tasks are left) until
/// `want` informative groups are found or `max_batches` batches were drawn. Returns the kept
/// episodes (their groups renumbered 0.. in the order found, episodes renumbered 0..), every
/// episode rolled out (for the iteration's rollout summary), and the report.
pub fn collect<F>(
    want: usize,
    max_batches: usize,
    mut roll: F,
) -> Result<(Vec<EpisodeRecord>, Vec<EpisodeRecord>, DynamicReport)>
where
    F: FnMut(usize) -> Result<Option<Vec<EpisodeRecord>>>,
{
    let mut kept: Vec<EpisodeRecord> = Vec::new();
    let mut all: Vec<EpisodeRecord> = Vec::new();
    let mut report = DynamicReport::default();
    while report.groups_kept < want && report.batches < max_batches {
        let Some(batch) = roll(report.batches)? else {
            break;
        };
        report.batches += 1;
        let mut groups: Vec<usize> = batch.iter().map(|r| r.group).collect();
        groups.sort_unstable();
        groups.dedup();
        report.groups_generated += groups.len();
        let informative = informative_groups(&batch);
        report.groups_informative += informative.len();
        for g in informative {
            if report.groups_kept == want {
                break;
            }
            for r in batch.iter().filter(|r| r.group == g) {
                let mut r = r.clone();
                r.group = report.groups_kept;
                r.episode = kept.len();
                kept.push(r);
            }
            report.groups_kept += 1;
        }
        all.extend(batch);
    }
    Ok((kept, all, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(group: usize, reward: f64) -> EpisodeRecord {
        EpisodeRecord {
            episode: 0,
            env: "search".into(),
            task: group,
            group,
            task_text: String::new(),
            source: String::new(),
            turns: Vec::new(),
            success: reward > 0.0,
            score: reward,
            total_reward: reward,
            resamples: 0,
            void: false,
            reward_parts: Default::default(),
        }
    }

    /// A batch of `groups` groups of 2; `informative[g]`: its two rewards differ.
    fn batch(informative: &[bool]) -> Vec<EpisodeRecord> {
        informative
            .iter()
            .enumerate()
            .flat_map(|(g, &i)| [episode(g, 0.0), episode(g, if i { 1.0 } else { 0.0 })])
            .collect()
    }

    #[test]
    fn a_group_with_one_reward_is_not_informative() {
        let mut b = batch(&[true, false, true]);
        b.push(episode(1, 0.0));
        b.push(episode(3, 1.0)); // one episode alone: one reward
        assert_eq!(informative_groups(&b), vec![0, 2]);
        // Rewards that differ by a format penalty count.
        let mut c = vec![episode(0, 0.0), episode(0, -0.1)];
        c[1].success = false;
        assert_eq!(informative_groups(&c), vec![0]);
    }

    #[test]
    fn batches_are_drawn_until_the_groups_are_full_and_the_extras_cut() {
        let batches = [
            batch(&[false, true, false]),
            batch(&[false, false, false]),
            batch(&[true, true, true]),
        ];
        let (kept, all, report) = collect(3, 10, |b| Ok(batches.get(b).cloned())).unwrap();
        assert_eq!(
            report,
            DynamicReport {
                batches: 3,
                groups_generated: 9,
                groups_informative: 4,
                groups_kept: 3,
            }
        );
        assert_eq!(all.len(), 18);
        // Groups renumbered in the order found; each keeps its two episodes.
        let groups: Vec<usize> = kept.iter().map(|r| r.group).collect();
        assert_eq!(groups, vec![0, 0, 1, 1, 2, 2]);
        let episodes: Vec<usize> = kept.iter().map(|r| r.episode).collect();
        assert_eq!(episodes, (0..6).collect::<Vec<_>>());
        assert_eq!(informative_groups(&kept), vec![0, 1, 2]);
    }

    #[test]
    fn the_batch_limit_and_running_out_of_tasks_end_it_with_what_was_found() {
        let every = |_| Ok(Some(batch(&[false, true])));
        let (kept, _, report) = collect(5, 2, every).unwrap();
        assert_eq!((report.batches, report.groups_kept, kept.len()), (2, 2, 4));
        let none = |_| Ok(Some(batch(&[false, false])));
        let (kept, all, report) = collect(1, 3, none).unwrap();
        assert!(kept.is_empty());
        assert_eq!((report.batches, all.len()), (3, 12));
        let (kept, _, report) = collect(4, 9, |b| Ok((b < 1).then(|| batch(&[true])))).unwrap();
        assert_eq!((report.batches, kept.len()), (1, 2));
        // The first batch full of informative groups is the plain rollout, cut to size.
        let (kept, all, report) = collect(2, 4, |_| Ok(Some(batch(&[true, true])))).unwrap();
        assert_eq!((report.batches, report.groups_kept), (1, 2));
        let key = |r: &EpisodeRecord| (r.group, r.task, r.total_reward.to_bits());
        assert_eq!(
            kept.iter().map(key).collect::<Vec<_>>(),
            all.iter().map(key).collect::<Vec<_>>()
        );
    }
}
