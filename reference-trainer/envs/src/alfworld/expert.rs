//! An ALFWorld expert in the spirit of the handcoded one (spec §2.8): subgoal plans per task
//! type (find → take → [heat/cool/clean] → find receptacle → put; look-at: take → find lamp →
//! use; pick-two: twice), progress recomputed every step from what it has observed and the
//! admissible list, the canContain priors to order the search (visited from the end, other
//! receptacles as a fallback), opening closed receptacles on the way. It works only from the
//! observations, the admissible commands and the task parameters, and writes a short `<think>`.

use super::vocab;
use super::world::{Task, TaskType};
use std::collections::{HashMap, HashSet};

/// `apple 12` → `apple`.
fn class_of(name: &str) -> &str {
    name.rsplit_once(' ').map_or(name, |(c, n)| {
        if n.chars().all(|d| d.is_ascii_digit()) {
            c
        } else {
            name
        }
    })
}

/// `a apple 1, a egg 2, and a mug 1` → names.
fn parse_list(list: &str) -> Vec<String> {
    let list = list.trim().trim_end_matches('.');
    if list == "nothing" {
        return Vec::new();
    }
    list.split(", ")
        .map(|s| {
            s.trim_start_matches("and ")
                .trim_start_matches("a ")
                .to_string()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

/// One episode of the expert.
#[derive(Clone, Debug)]
pub struct AlfworldExpert {
    task: Task,
    obj: String,
    recep: String,
    toggle: String,
    receptacles: Vec<String>,
    seen: HashMap<String, Vec<String>>,
    closed: HashSet<String>,
    checked: HashSet<String>,
    holding: Option<String>,
    treated: bool,
    placed: HashSet<String>,
    last: String,
}

impl AlfworldExpert {
    /// A session for a game with this task, given the intro observation.
    pub fn new(task: &Task, intro: &str) -> Self {
        let receptacles = intro
            .split_once("you see ")
            .map(|(_, r)| r.split_once(".\n").map_or(r, |(l, _)| l))
            .map(parse_list)
            .unwrap_or_default();
        Self {
            obj: task.object.to_lowercase(),
            recep: task.receptacle.to_lowercase(),
            toggle: task.toggle.to_lowercase(),
            task: task.clone(),
            receptacles,
            seen: HashMap::new(),
            closed: HashSet::new(),
            checked: HashSet::new(),
            holding: None,
            treated: false,
            placed: HashSet::new(),
            last: String::new(),
        }
    }

    /// Updates the memory from the feedback of the last action.
    fn observe(&mut self, obs: &str) {
        // A receptacle counts as checked once its contents were seen (a closed one is not).
        let record = |r: &str, list: Option<&str>, this: &mut Self| match list {
            Some(l) => {
                this.checked.insert(r.to_string());
                this.closed.remove(r);
                this.seen.insert(r.to_string(), parse_list(l));
            }
            None => {
                this.closed.insert(r.to_string());
            }
        };
        let body = obs
            .strip_prefix("You arrive at ")
            .map_or(obs, |rest| rest.split_once(". ").map_or(rest, |(_, b)| b));
        if let Some(rest) = body.strip_prefix("You open the ") {
            if let Some((r, tail)) = rest.split_once(". ") {
                let list = tail.split_once("you see ").map(|(_, l)| l);
                record(r, list, self);
            }
        } else if let Some(rest) = body.strip_prefix("The ") {
            if let Some((r, tail)) = rest.split_once(" is open. In it, you see ") {
                record(r, Some(tail), self);
            } else if let Some(r) = rest.strip_suffix(" is closed.") {
                record(r, None, self);
            }
        } else if let Some(rest) = body.strip_prefix("On the ") {
            if let Some((r, list)) = rest.split_once(", you see ") {
                record(r, Some(list), self);
            }
        } else if let Some(rest) = obs.strip_prefix("You pick up the ") {
            if let Some((o, r)) = rest.trim_end_matches('.').split_once(" from the ") {
                self.holding = Some(o.to_string());
                self.treated = false;
                if let Some(l) = self.seen.get_mut(r) {
                    l.retain(|x| x != o);
                }
            }
        } else if let Some(rest) = obs
            .strip_prefix("You move the ")
            .or_else(|| obs.strip_prefix("You put the "))
        {
            let rest = rest.trim_end_matches('.');
            if let Some((o, r)) = rest
                .split_once(" to the ")
                .or_else(|| rest.split_once(" in/on the "))
            {
                self.holding = None;
                self.seen
                    .entry(r.to_string())
                    .or_default()
                    .push(o.to_string());
                if class_of(r) == self.recep && class_of(o) == self.obj {
                    self.placed.insert(o.to_string());
                }
            }
        } else if obs.starts_with("You heat the ")
            || obs.starts_with("You cool the ")
            || obs.starts_with("You clean the ")
        {
            self.treated = true;
        }
    }

    /// Receptacles to search for `class`, in visiting order: canContain holders first (from the
    /// end of the list), then the others; unchecked ones only.
    fn search_order(&self, class: &str) -> Vec<String> {
        let camel = match class {
            c if c == self.obj => self.task.object.as_str(),
            c if c == self.toggle => self.task.toggle.as_str(),
            _ => class,
        };
        let (mut likely, mut other): (Vec<String>, Vec<String>) = self
            .receptacles
            .iter()
            .filter(|r| !self.checked.contains(*r))
            .cloned()
            .partition(|r| {
                let rc = class_of(r);
                let holds = vocab::can_contain_lower(rc)
                    .iter()
                    .any(|o| o.eq_ignore_ascii_case(camel));
                holds
                    || (camel == self.task.toggle
                        && ["sidetable", "desk", "dresser", "coffeetable", "shelf"].contains(&rc))
            });
        likely.reverse();
        other.reverse();
        // Where the object is to go is searched last: it is rarely already there.
        let (mut first, last): (Vec<String>, Vec<String>) = likely
            .into_iter()
            .partition(|r| class_of(r) != self.recep || class != self.obj);
        first.extend(last);
        first.extend(other);
        first
    }

    fn find(&self, class: &str, exclude: &HashSet<String>) -> Option<(String, String)> {
        let mut best: Option<(String, String)> = None;
        for (r, objs) in &self.seen {
            if self.recep == class_of(r)
                && (class == self.obj)
                && self.task.kind == TaskType::PickTwo
            {
                continue; // do not take back what is already in place
            }
            for o in objs {
                if class_of(o) == class && !exclude.contains(o) {
                    let cand = (o.clone(), r.clone());
                    if best.as_ref().is_none_or(|b| cand < *b) {
                        best = Some(cand);
                    }
                }
            }
        }
        best
    }

    /// Go to `r`, or (if it shares our location) examine or open it.
    fn approach(&self, r: &str, admissible: &[String]) -> String {
        let go = format!("go to {r}");
        if admissible.contains(&go) {
            return go;
        }
        let open = format!("open {r}");
        if admissible.contains(&open) {
            return open;
        }
        format!("examine {r}")
    }

    fn explore(&self, class: &str, admissible: &[String]) -> String {
        match self.search_order(class).first() {
            Some(r) => self.approach(r, admissible),
            None => "look".to_string(),
        }
    }

    /// The next command, from the feedback of the last step and the admissible list.
    pub fn act(&mut self, observation: &str, admissible: &[String]) -> String {
        self.observe(observation);
        let cmd = self.decide(admissible);
        self.last = cmd.clone();
        cmd
    }

    fn decide(&mut self, admissible: &[String]) -> String {
        let has = |c: &str| admissible.iter().any(|a| a == c);
        if let Some(h) = self.holding.clone() {
            if class_of(&h) != self.obj {
                // Not what we need: put it down wherever it fits here, else anywhere it fits.
                if let Some(put) = admissible.iter().find(|a| {
                    a.starts_with(&format!("move {h} to "))
                        || a.starts_with(&format!("put {h} in/on "))
                }) {
                    return put.clone();
                }
                return self.explore("__anywhere__", admissible);
            }
            if self.task.kind == TaskType::LookAtInLight {
                if let Some(use_cmd) = admissible
                    .iter()
                    .find(|a| a.starts_with("use ") && class_of(&a[4..]) == self.toggle)
                {
                    return use_cmd.clone();
                }
                if let Some((_, r)) = self.find(&self.toggle.clone(), &HashSet::new()) {
                    return self.approach(&r, admissible);
                }
                return self.explore(&self.toggle.clone(), admissible);
            }
            let appliance = match self.task.kind {
                TaskType::Heat => Some(("heat", vec!["microwave"])),
                TaskType::Cool => Some(("cool", vec!["fridge"])),
                TaskType::Clean => Some(("clean", vec!["sinkbasin", "bathtubbasin"])),
                _ => None,
            };
            if let Some((verb, classes)) = appliance {
                if !self.treated {
                    if let Some(c) = admissible
                        .iter()
                        .find(|a| a.starts_with(&format!("{verb} {h} with ")))
                    {
                        return c.clone();
                    }
                    let target = classes
                        .iter()
                        .find_map(|c| self.receptacles.iter().find(|r| class_of(r) == *c))
                        .cloned();
                    if let Some(r) = target {
                        return self.approach(&r, admissible);
                    }
                }
            }
            // Place it: a target receptacle here that takes it, else open one here, else go.
            if let Some(put) = admissible.iter().find(|a| {
                (a.starts_with(&format!("move {h} to "))
                    || a.starts_with(&format!("put {h} in/on ")))
                    && class_of(
                        a.rsplit_once(" to ")
                            .or_else(|| a.rsplit_once(" in/on "))
                            .map_or("", |(_, r)| r),
                    ) == self.recep
            }) {
                return put.clone();
            }
            let targets: Vec<String> = self
                .receptacles
                .iter()
                .filter(|r| class_of(r) == self.recep)
                .cloned()
                .collect();
            for r in &targets {
                if has(&format!("open {r}")) {
                    return format!("open {r}");
                }
            }
            // Prefer the receptacle already holding the first of two.
            let preferred = targets
                .iter()
                .find(|r| {
                    self.seen
                        .get(*r)
                        .is_some_and(|l| l.iter().any(|o| self.placed.contains(o)))
                })
                .or_else(|| targets.first())
                .cloned();
            return match preferred {
                Some(r) => self.approach(&r, admissible),
                None => "look".into(),
            };
        }
        // Hands empty: find an instance of the target class.
        let exclude = self.placed.clone();
        if let Some((o, r)) = self.find(&self.obj.clone(), &exclude) {
            let take = format!("take {o} from {r}");
            if has(&take) {
                return take;
            }
            return self.approach(&r, admissible);
        }
        self.explore(&self.obj.clone(), admissible)
    }

    /// A full model response: a short rationale and the command in `<action>` tags.
    pub fn respond(&mut self, observation: &str, admissible: &[String]) -> String {
        let cmd = self.act(observation, admissible);
        let why = match (&self.holding, self.task.kind) {
            (None, _) => format!(
                "I need a {} first; I look where one is likely to be.",
                self.obj
            ),
            (Some(h), TaskType::LookAtInLight) => format!(
                "I hold the {h}; now I need the {} to look at it.",
                self.toggle
            ),
            (Some(h), TaskType::Heat | TaskType::Cool | TaskType::Clean) if !self.treated => {
                format!(
                    "I hold the {h}; it must be treated before I put it in the {}.",
                    self.recep
                )
            }
            (Some(h), _) => format!("I hold the {h}; I bring it to the {}.", self.recep),
        };
        format!("<think>{why}</think><action>{cmd}</action>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_classes() {
        assert_eq!(
            parse_list("a apple 1, a egg 2, and a mug 1."),
            ["apple 1", "egg 2", "mug 1"]
        );
        assert_eq!(parse_list("a apple 1, and a egg 2"), ["apple 1", "egg 2"]);
        assert!(parse_list("nothing").is_empty());
        assert_eq!(class_of("cabinet 10"), "cabinet");
        assert_eq!(class_of("sinkbasin"), "sinkbasin");
    }
}
