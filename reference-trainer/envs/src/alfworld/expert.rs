//! An ALFWorld expert in the spirit of the handcoded one (spec §2.8): subgoal plans per task
//! type (find → take → [heat/cool/clean] → find receptacle → put; look-at: take → find lamp →
//! use; pick-two: twice), progress recomputed every step from what it has observed and the
//! admissible list, the canContain priors to order the search (visited from the end, other
//! receptacles as a fallback), opening closed receptacles on the way. It works only from the
//! observations, the admissible commands and the task parameters.
//!
//! Each response is a full policy response, `<think>…</think>\n<action>…</action>` (strict
//! format, valid under [`super::project`]), the cold-start demonstration data. The rationale
//! states the sub-goal of the plan the command serves, from what the expert has seen, with the
//! wording and optional sentences chosen by the expert's seeded generator:
//!
//! - the plan (always at the first step, now and then later): "My task is to put a hot apple in
//!   fridge. The plan: find an apple, heat it with the microwave, then put it in the fridge.";
//! - searching: the object still to find, where such objects usually are (the canContain prior)
//!   and the receptacle not checked yet ("I still need to find a mug. Mugs are usually in a
//!   cabinet, countertop or shelf. I haven't checked cabinet 3 yet, so I'll go there."), or a
//!   closed receptacle to open, or going back to where one was seen;
//! - taking: the object seen on the receptacle here (and, for pick-two, that it is the second);
//! - treating: the object must be heated / cooled / cleaned before it is placed, and where;
//! - looking in the light: the lamp still to find, or turning it on while holding the object;
//! - placing: the object is ready and where it goes, or a wrong object put down.

use super::vocab;
use super::world::{Task, TaskType};
use super::AlfworldEnv;
use crate::rng::Rng;
use crate::{format_response, Expert, Observation};
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

/// `word` with "a" or "an" before it (the game itself writes "a apple"; the rationale should
/// read like good text).
fn with_a(word: &str) -> String {
    let article = if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {word}")
}

/// [`with_a`] at the start of a sentence.
fn with_cap_a(word: &str) -> String {
    let w = with_a(word);
    format!("A{}", &w[1..])
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
    turn: usize,
    rng: Rng,
}

impl AlfworldExpert {
    /// A session for a game with this task, given the intro observation; `seed` chooses the
    /// rationale wording.
    pub fn new(task: &Task, intro: &str, seed: u64) -> Self {
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
            turn: 0,
            rng: Rng::new(seed),
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

    /// A full model response: the rationale in `<think>` tags and the command in `<action>`
    /// tags, from the feedback of the last step and the admissible list.
    pub fn response(&mut self, observation: &str, admissible: &[String]) -> String {
        self.observe(observation);
        let cmd = self.decide(admissible);
        let think = self.think(&cmd);
        self.last = cmd.clone();
        self.turn += 1;
        format_response(&think, "action", &cmd)
    }

    /// The treatment the task needs: (verb, past participle, the appliance class in this room).
    fn treatment(&self) -> Option<(&'static str, &'static str, &'static str)> {
        let (verb, done, classes): (_, _, &[&'static str]) = match self.task.kind {
            TaskType::Heat => ("heat", "heated", &["microwave"]),
            TaskType::Cool => ("cool", "cooled", &["fridge"]),
            TaskType::Clean => ("clean", "cleaned", &["sinkbasin", "bathtubbasin"]),
            _ => return None,
        };
        let here = classes
            .iter()
            .copied()
            .find(|c| self.receptacles.iter().any(|r| class_of(r) == *c))
            .unwrap_or(classes[0]);
        Some((verb, done, here))
    }

    fn plan(&mut self) -> String {
        let (o, r, t) = (&self.obj, &self.recep, &self.toggle);
        let (ao, at) = (with_a(o), with_a(t));
        let steps = match (self.task.kind, self.treatment()) {
            (TaskType::PickTwo, _) => {
                format!(
                    "find {ao}, put it in/on the {r}, then find a second one and put it there too"
                )
            }
            (TaskType::LookAtInLight, _) => {
                format!("find {ao}, take it, then find {at} and turn it on to look at the {o}")
            }
            (_, Some((verb, _, appliance))) => {
                format!("find {ao}, {verb} it with the {appliance}, then put it in/on the {r}")
            }
            _ => format!("find {ao}, take it, and put it in/on the {r}"),
        };
        let goal = &self.task.goal;
        match self.rng.below(3) {
            0 => format!("My task is to {goal}. The plan: {steps}."),
            1 => format!("The goal is to {goal}, so I need to {steps}."),
            _ => format!("To {goal}, I will {steps}."),
        }
    }

    /// Up to three receptacle classes where `class` is likely, in search order.
    fn likely_places(&self, class: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in self.search_order(class) {
            let c = class_of(&r).to_string();
            if !out.contains(&c) {
                out.push(c);
            }
            if out.len() == 3 {
                break;
            }
        }
        out
    }

    fn or_list(items: &[String]) -> String {
        match items {
            [] => String::new(),
            [a] => a.clone(),
            [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
        }
    }

    /// The rationale for `cmd`, decided from the current memory (before `cmd` runs).
    fn think(&mut self, cmd: &str) -> String {
        let mut s: Vec<String> = Vec::new();
        if self.turn == 0 || self.rng.chance(0.1) {
            s.push(self.plan());
        }
        let (verb, rest) = cmd.split_once(' ').unwrap_or((cmd, ""));
        let obj = self.obj.clone();
        let holding = self.holding.clone();
        let wanted_in_hand = holding.as_deref().is_some_and(|h| class_of(h) == obj);
        match verb {
            "take" => {
                let (o, r) = rest.split_once(" from ").unwrap_or((rest, ""));
                let ao = with_a(o);
                if self.task.kind == TaskType::PickTwo && !self.placed.is_empty() {
                    s.push(format!(
                        "One {obj} is already in the {}; this one will be the second.",
                        self.recep
                    ));
                }
                s.push(match self.rng.below(3) {
                    0 => format!("There is {ao} in/on the {r}."),
                    1 => format!("I can see {o} here at the {r}."),
                    _ => format!("The {r} has {ao}, which is what I need."),
                });
                s.push(
                    self.rng
                        .pick(&["I'll pick it up.", "I'll take it.", "Let me take it."])
                        .to_string(),
                );
            }
            "heat" | "cool" | "clean" => {
                let (o, r) = rest.split_once(" with ").unwrap_or((rest, ""));
                let done = self.treatment().map_or("treated", |t| t.1);
                s.push(format!(
                    "I'm at the {r} with the {o}, and it must be {done} before it goes to the {}.",
                    self.recep
                ));
                s.push(format!("I'll {verb} it now."));
            }
            "use" => {
                let h = holding.unwrap_or_else(|| obj.clone());
                s.push(match self.rng.below(2) {
                    0 => format!("I'm holding the {h} and the {rest} is right here."),
                    _ => format!("The {rest} is here and I have the {h}."),
                });
                s.push(format!(
                    "Turning it on lets me look at the {h} in the light."
                ));
            }
            "move" | "put" => {
                let (o, r) = rest
                    .split_once(" to ")
                    .or_else(|| rest.split_once(" in/on "))
                    .unwrap_or((rest, ""));
                if class_of(o) == obj {
                    let ready = match self.treatment() {
                        Some((_, done, _)) => format!("The {o} is {done} now"),
                        None => format!("I have the {o}"),
                    };
                    let last_one = self.task.kind != TaskType::PickTwo || !self.placed.is_empty();
                    s.push(format!(
                        "{ready}, and the {r} is where it belongs{}.",
                        if last_one { "" } else { " (the first of two)" }
                    ));
                    s.push(
                        self.rng
                            .pick(&["I'll put it there.", "I'll place it.", "Placing it now."])
                            .to_string(),
                    );
                } else {
                    s.push(format!(
                        "I'm carrying the {o}, which the task doesn't need, so I'll put it down on the {r}."
                    ));
                }
            }
            "go" | "open" | "examine" => {
                let r = rest.trim_start_matches("to ");
                let how = match verb {
                    "go" => format!("I'll go to the {r}."),
                    "open" if wanted_in_hand => format!("The {r} is closed; I'll open it first."),
                    "open" => format!("The {r} is closed; I'll open it and look inside."),
                    _ => format!("I'm at the {r}; I'll examine it."),
                };
                match holding {
                    Some(h) if !wanted_in_hand => {
                        s.push(format!(
                            "I'm holding the {h}, which I don't need; I'll find a place to put it down."
                        ));
                    }
                    Some(h) if self.task.kind == TaskType::LookAtInLight => {
                        let t = self.toggle.clone();
                        let at = with_a(&t);
                        s.push(format!(
                            "I have the {h}; now I need {at} to look at it in the light."
                        ));
                        if class_of(r) != t && self.rng.chance(0.6) {
                            let places = self.likely_places(&t);
                            if !places.is_empty() {
                                s.push(format!(
                                    "{} is usually on a {}.",
                                    with_cap_a(&t),
                                    Self::or_list(&places)
                                ));
                            }
                        }
                    }
                    Some(h) => match self.treatment() {
                        Some((_, v, appliance)) if !self.treated => {
                            s.push(format!(
                                "The {h} has to be {v} in the {appliance} before it goes to the {}.",
                                self.recep
                            ));
                        }
                        _ => s.push(match self.rng.below(2) {
                            0 => format!("Next the {h} goes to the {}.", self.recep),
                            _ => format!("Now I bring the {h} to the {}.", self.recep),
                        }),
                    },
                    None => {
                        let ao = with_a(&obj);
                        let seen_here = self
                            .find(&obj, &self.placed.clone())
                            .is_some_and(|(_, at)| at == r);
                        if seen_here && verb == "go" {
                            s.push(format!(
                                "I saw {ao} at the {r} earlier; I'll go back there for it."
                            ));
                            return s.join(" ");
                        } else if seen_here {
                            s.push(format!("I saw {ao} at the {r} earlier."));
                        } else {
                            let second =
                                self.task.kind == TaskType::PickTwo && !self.placed.is_empty();
                            s.push(match (second, self.rng.below(3)) {
                                (true, _) => format!("I still need a second {obj}."),
                                (false, 0) => format!("I still need to find {ao}."),
                                (false, 1) => format!("I haven't found {ao} yet."),
                                (false, _) => format!("Next I need {ao}."),
                            });
                            if self.rng.chance(0.7) {
                                let places = self.likely_places(&obj);
                                if !places.is_empty() {
                                    s.push(format!(
                                        "{} is usually in a {}.",
                                        with_cap_a(&obj),
                                        Self::or_list(&places)
                                    ));
                                }
                            }
                            if verb == "go" {
                                s.push(match self.rng.below(2) {
                                    0 => {
                                        format!("I haven't checked the {r} yet, so I'll go there.")
                                    }
                                    _ => format!("The {r} is still unchecked; let me go there."),
                                });
                                return s.join(" ");
                            }
                        }
                    }
                }
                s.push(how);
            }
            "look" => {
                s.push("I have checked the places I know of; I'll look around again.".to_string())
            }
            _ => s.push(format!("I'll {cmd}.")),
        }
        s.join(" ")
    }
}

impl Expert<AlfworldEnv> for AlfworldExpert {
    fn respond(&mut self, _env: &AlfworldEnv, observation: &Observation) -> String {
        self.response(&observation.text, &observation.admissible)
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
