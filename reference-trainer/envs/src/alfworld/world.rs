//! The ALFWorld text world (spec §2.2–2.6): a typed state over receptacles, objects and
//! locations, the active `alfred.pddl` actions, the exact `alfred.twl2` feedback strings, the
//! admissible-command list (grounded applicable actions, deduplicated, Python string order) and
//! the six task types' success conditions.

use super::vocab;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The six task types (`traj_data.task_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskType {
    /// pick_and_place_simple
    PickAndPlace,
    /// look_at_obj_in_light
    LookAtInLight,
    /// pick_clean_then_place_in_recep
    Clean,
    /// pick_heat_then_place_in_recep
    Heat,
    /// pick_cool_then_place_in_recep
    Cool,
    /// pick_two_obj_and_place
    PickTwo,
}

impl TaskType {
    /// All six, in the spec's numbering order (1..6).
    pub const ALL: [TaskType; 6] = [
        TaskType::PickAndPlace,
        TaskType::LookAtInLight,
        TaskType::Clean,
        TaskType::Heat,
        TaskType::Cool,
        TaskType::PickTwo,
    ];

    /// The `traj_data.task_type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::PickAndPlace => "pick_and_place_simple",
            TaskType::LookAtInLight => "look_at_obj_in_light",
            TaskType::Clean => "pick_clean_then_place_in_recep",
            TaskType::Heat => "pick_heat_then_place_in_recep",
            TaskType::Cool => "pick_cool_then_place_in_recep",
            TaskType::PickTwo => "pick_two_obj_and_place",
        }
    }

    /// Parses a `traj_data.task_type` string.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// What the task asks for: classes are CamelCase (`Apple`, `SinkBasin`, `DeskLamp`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// The task type.
    pub kind: TaskType,
    /// `pddl_params.object_target`.
    pub object: String,
    /// `pddl_params.parent_target` (empty for look_at).
    pub receptacle: String,
    /// `pddl_params.toggle_target` (look_at only).
    pub toggle: String,
    /// The goal sentence, without the final period.
    pub goal: String,
}

/// Which put verb the game's grammar uses (spec §2.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutGrammar {
    /// 0.4+: `move {o} to {r}` / `You move the {o} to the {r}.`
    Move,
    /// ≤ 0.3: `put {o} in/on {r}` / `You put the {o} in/on the {r}.`
    PutInOn,
}

/// A receptacle (static furniture or appliance).
#[derive(Clone, Debug, PartialEq)]
pub struct Receptacle {
    /// The PDDL id (unmangled, e.g. `Cabinet|-01.75|+00.98|-00.36`); sorting uses it.
    pub id: String,
    /// CamelCase class.
    pub class: String,
    /// Display name, `cabinet 3`.
    pub name: String,
    /// Location index (several receptacles may share one).
    pub location: usize,
    /// Opens and closes.
    pub openable: bool,
    /// Currently open.
    pub opened: bool,
}

/// An object.
#[derive(Clone, Debug, PartialEq)]
pub struct Object {
    /// The PDDL id.
    pub id: String,
    /// CamelCase class.
    pub class: String,
    /// Display name, `apple 2`.
    pub name: String,
    /// The receptacle it is in, `None` while held.
    pub inside: Option<usize>,
    /// Can be taken.
    pub pickupable: bool,
    /// A receptacle object (bowl, mug, …).
    pub receptacle_object: bool,
    /// `isHot`.
    pub hot: bool,
    /// `isCool`.
    pub cool: bool,
    /// `isClean`.
    pub clean: bool,
    /// `isSliced`.
    pub sliced: bool,
    /// `isToggled`.
    pub toggled: bool,
    /// `isOn`.
    pub on: bool,
    /// `heatable`. The affordances are facts of the problem, not of the class: real ALFRED files
    /// state them only for the task's objects (a lamp that is not the toggle target is not
    /// `toggleable`), and the engine's actions and goals test the facts.
    pub heatable: bool,
    /// `coolable`.
    pub coolable: bool,
    /// `cleanable`.
    pub cleanable: bool,
    /// `sliceable`.
    pub sliceable: bool,
    /// `toggleable`.
    pub toggleable: bool,
    /// `objectAtLocation`: where the object is (`None` while held, or when the file gives no
    /// location). Real files put an object at its nearest navigable point, which need not be
    /// its receptacle's location; `slice` tests this fact.
    pub at: Option<usize>,
}

/// A grounded action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `go to r`
    GoTo(usize),
    /// `open r`
    Open(usize),
    /// `close r`
    Close(usize),
    /// `take o from r`
    Take(usize, usize),
    /// `move o to r` / `put o in/on r`
    Put(usize, usize),
    /// `heat o with r`
    Heat(usize, usize),
    /// `cool o with r`
    Cool(usize, usize),
    /// `clean o with r`
    Clean(usize, usize),
    /// `use o`
    Use(usize),
    /// `slice o with k`
    Slice(usize, usize),
    /// `examine r`
    ExamineReceptacle(usize),
    /// `examine o`
    ExamineObject(usize),
    /// `look`
    Look,
    /// `inventory`
    Inventory,
    /// `help`
    Help,
}

/// The help text of the 0.4+ grammar, as the engine prints it: `alfred.twl2`'s text without the
/// newline that opens the rule (TextWorld strips the derived feedback).
pub const HELP: &str = "Available commands:\n  look:                             look around your current location\n  inventory:                        check your current inventory\n  go to (receptacle):               move to a receptacle\n  open (receptacle):                open a receptacle\n  close (receptacle):               close a receptacle\n  take (object) from (receptacle):  take an object from a receptacle\n  move (object) to (receptacle):  place an object in or on a receptacle\n  examine (something):              examine a receptacle or an object\n  use (object):                     use an object\n  heat (object) with (receptacle):  heat an object using a receptacle\n  clean (object) with (receptacle): clean an object using a receptacle\n  cool (object) with (receptacle):  cool an object using a receptacle\n  slice (object) with (object):     slice an object using a sharp object\n";

/// The world state of one game.
#[derive(Clone, Debug, PartialEq)]
pub struct World {
    /// Receptacles, sorted by id.
    pub receptacles: Vec<Receptacle>,
    /// Objects, sorted by id.
    pub objects: Vec<Object>,
    /// The agent's location (`start_location` holds no receptacle).
    pub agent: usize,
    /// Where the agent starts.
    pub start_location: usize,
    /// The held object.
    pub held: Option<usize>,
    /// The put verb of the game's grammar.
    pub put_grammar: PutGrammar,
    /// `help` exists in the grammar (0.4+).
    pub has_help: bool,
    /// Old games say `You arrive at loc {N}.`
    pub arrive_at_loc: bool,
    /// The task.
    pub task: Task,
    /// The problem's `canContain` facts as (receptacle class, object class), CamelCase; `None`
    /// uses the generator's table ([`vocab::contains`]).
    pub can_contain: Option<Arc<BTreeSet<(String, String)>>>,
}

/// `nothing` / `a X` / `a X, a Y, and a Z` (the last separator is always ", and ").
pub fn render_list<S: AsRef<str>>(names: &[S]) -> String {
    match names.len() {
        0 => "nothing".to_string(),
        1 => format!("a {}", names[0].as_ref()),
        n => {
            let head: Vec<String> = names[..n - 1]
                .iter()
                .map(|s| format!("a {}", s.as_ref()))
                .collect();
            format!("{}, and a {}", head.join(", "), names[n - 1].as_ref())
        }
    }
}

/// The order the engine sorts entity ids in: Fast Downward lowercases the PDDL names, and the
/// Demangler sorts those lowercased mangled ids (`cabinet_bar__minus_01…` before
/// `cabinet_bar__plus_00…`; `toilet_bar_…` before `toiletpaperhanger_bar_…`). `id` is the
/// unmangled id (`Cabinet|-01.75|…`).
pub fn engine_key(id: &str) -> String {
    super::game::mangle(id).to_ascii_lowercase()
}

/// Assigns `class N` names over ids (unmangled): per class, ids sorted by [`engine_key`],
/// numbers handed out by popping from the end, so the first id in sorted order gets the
/// highest number (the Demangler of `alfworld.agents.utils.misc`).
pub fn number_names(entities: &[(String, String)]) -> Vec<String> {
    let mut names = vec![String::new(); entities.len()];
    let mut classes: Vec<&str> = entities.iter().map(|(_, c)| c.as_str()).collect();
    classes.sort_unstable();
    classes.dedup();
    for class in classes {
        let mut idx: Vec<usize> = (0..entities.len())
            .filter(|&i| entities[i].1 == class)
            .collect();
        idx.sort_by_cached_key(|&i| engine_key(&entities[i].0));
        let lower = class.to_lowercase();
        let mut n = 1;
        while let Some(i) = idx.pop() {
            names[i] = format!("{lower} {n}");
            n += 1;
        }
    }
    names
}

impl World {
    fn here(&self, r: usize) -> bool {
        self.receptacles[r].location == self.agent
    }

    fn accessible(&self, r: usize) -> bool {
        let rec = &self.receptacles[r];
        !rec.openable || rec.opened
    }

    /// Objects inside receptacle `r`, in id order.
    pub fn contents(&self, r: usize) -> Vec<usize> {
        (0..self.objects.len())
            .filter(|&o| self.objects[o].inside == Some(r))
            .collect()
    }

    fn names(&self, objects: &[usize]) -> Vec<&str> {
        objects
            .iter()
            .map(|&o| self.objects[o].name.as_str())
            .collect()
    }

    /// Objects the agent can see: in an open-or-non-openable receptacle here.
    fn visible(&self) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        for (o, obj) in self.objects.iter().enumerate() {
            if let Some(r) = obj.inside {
                if self.here(r) && self.accessible(r) {
                    v.push((o, r));
                }
            }
        }
        v
    }

    /// The reset observation.
    pub fn intro(&self) -> String {
        let all: Vec<&str> = self.receptacles.iter().map(|r| r.name.as_str()).collect();
        format!(
            "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see {}.\n\nYour task is to: {}.",
            render_list(&all),
            self.task.goal
        )
    }

    fn examine_receptacle(&self, r: usize) -> String {
        let rec = &self.receptacles[r];
        let list = render_list(&self.names(&self.contents(r)));
        if rec.openable {
            if rec.opened {
                format!("The {} is open. In it, you see {list}.", rec.name)
            } else {
                format!("The {} is closed.", rec.name)
            }
        } else {
            format!("On the {}, you see {list}.", rec.name)
        }
    }

    /// The put command and its feedback (the ≤ 0.3 grammar says "in/on" literally).
    fn put_text(&self, o: &str, r: &str) -> (String, String) {
        match self.put_grammar {
            PutGrammar::Move => (
                format!("move {o} to {r}"),
                format!("You move the {o} to the {r}."),
            ),
            PutGrammar::PutInOn => (
                format!("put {o} in/on {r}"),
                format!("You put the {o} in/on the {r}."),
            ),
        }
    }

    /// Every grounded applicable action with its command text, deduplicated by text and sorted
    /// in Python string order (byte order: "cabinet 10" before "cabinet 2").
    pub fn actions(&self) -> Vec<(String, Action)> {
        let mut out: Vec<(String, Action)> = Vec::new();
        let here: Vec<usize> = (0..self.receptacles.len())
            .filter(|&r| self.here(r))
            .collect();
        for (r, rec) in self.receptacles.iter().enumerate() {
            if !self.here(r) {
                out.push((format!("go to {}", rec.name), Action::GoTo(r)));
            }
        }
        for &r in &here {
            let rec = &self.receptacles[r];
            out.push((
                format!("examine {}", rec.name),
                Action::ExamineReceptacle(r),
            ));
            if rec.openable {
                if rec.opened {
                    out.push((format!("close {}", rec.name), Action::Close(r)));
                } else {
                    out.push((format!("open {}", rec.name), Action::Open(r)));
                }
            }
        }
        let visible = self.visible();
        match self.held {
            None => {
                for &(o, r) in &visible {
                    if self.objects[o].pickupable {
                        out.push((
                            format!(
                                "take {} from {}",
                                self.objects[o].name, self.receptacles[r].name
                            ),
                            Action::Take(o, r),
                        ));
                    }
                }
            }
            Some(h) => {
                let held = &self.objects[h];
                for &r in &here {
                    let rec = &self.receptacles[r];
                    if self.accessible(r) && self.holds(&rec.class, &held.class) {
                        let (cmd, _) = self.put_text(&held.name, &rec.name);
                        out.push((cmd, Action::Put(h, r)));
                    }
                    if rec.class == "Microwave" && held.heatable {
                        out.push((
                            format!("heat {} with {}", held.name, rec.name),
                            Action::Heat(h, r),
                        ));
                    }
                    if rec.class == "Fridge" && held.coolable {
                        out.push((
                            format!("cool {} with {}", held.name, rec.name),
                            Action::Cool(h, r),
                        ));
                    }
                    // CleanObject takes `(receptacleType ?r SinkBasinType)` only (the
                    // SinkType alternative is commented out in `alfred.pddl`).
                    if rec.class == "SinkBasin" && held.cleanable {
                        out.push((
                            format!("clean {} with {}", held.name, rec.name),
                            Action::Clean(h, r),
                        ));
                    }
                }
                // examineObject in the shipped `alfred.pddl` is `(or (exists (?l - location, ?r -
                // receptacle) …) (holds ?a ?o))`: the comma makes `location,` a type that no
                // object has, so the first branch never holds and only the held object can be
                // examined. The engine's behaviour is what counts, so the same here.
                out.push((format!("examine {}", held.name), Action::ExamineObject(h)));
                // SliceObject: `(sliceable ?co)`, `(objectAtLocation ?co ?l)` at the agent's
                // location (whatever holds it, open or closed) and a held knife.
                if held.class == "Knife" || held.class == "ButterKnife" {
                    for (o, obj) in self.objects.iter().enumerate() {
                        if obj.sliceable && obj.at == Some(self.agent) {
                            out.push((
                                format!("slice {} with {}", obj.name, held.name),
                                Action::Slice(o, h),
                            ));
                        }
                    }
                }
            }
        }
        for (o, obj) in self.objects.iter().enumerate() {
            if obj.toggleable && obj.inside.is_some_and(|r| self.here(r)) {
                out.push((format!("use {}", obj.name), Action::Use(o)));
            }
        }
        out.push(("inventory".into(), Action::Inventory));
        out.push(("look".into(), Action::Look));
        if self.has_help {
            out.push(("help".into(), Action::Help));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }

    /// `canContain` for a receptacle class and an object class.
    fn holds(&self, receptacle: &str, object: &str) -> bool {
        match &self.can_contain {
            Some(set) => set.contains(&(receptacle.to_string(), object.to_string())),
            None => vocab::contains(receptacle, object),
        }
    }

    /// The admissible commands.
    pub fn admissible(&self) -> Vec<String> {
        self.actions().into_iter().map(|(c, _)| c).collect()
    }

    fn examine_object(&self, o: usize) -> String {
        let obj = &self.objects[o];
        let n = &obj.name;
        if obj.receptacle_object {
            let inside: Vec<&str> = Vec::new();
            return format!(
                "This is a normal {n}. In it, you see {}.",
                render_list(&inside)
            );
        }
        let (h, c, k, s) = (obj.hot, obj.cool, obj.clean, obj.sliced);
        match () {
            _ if h && k && s => format!("This is a hot and clean sliced {n}."),
            _ if c && k && s => format!("This is a cool and clean sliced {n}."),
            _ if k && s => format!("This is a clean sliced {n}."),
            _ if h && s => format!("This is a hot sliced {n}."),
            _ if c && s => format!("This is a cool sliced {n}."),
            _ if h && k => format!("This is a hot and clean {n}."),
            _ if c && k => format!("This is a cool and clean {n}."),
            _ if h => format!("This is a hot {n}."),
            _ if k => format!("This is a clean {n}."),
            _ if c => format!("This is a cold {n}."),
            _ if obj.toggleable => {
                format!("This {n} is {}.", if obj.toggled { "on" } else { "off" })
            }
            _ if s && obj.sliceable => format!("This is a sliced {n}."),
            _ => format!("There's nothing special about {n}."),
        }
    }

    /// Executes a command: exact match (after `trim`) against the admissible list, else
    /// `Nothing happens.` Returns the feedback text.
    pub fn execute(&mut self, command: &str) -> String {
        let command = command.trim();
        let Some((_, action)) = self.actions().into_iter().find(|(c, _)| c == command) else {
            return "Nothing happens.".to_string();
        };
        self.apply(action)
    }

    fn apply(&mut self, action: Action) -> String {
        match action {
            Action::GoTo(r) => {
                self.agent = self.receptacles[r].location;
                let arrive = if self.arrive_at_loc {
                    format!("You arrive at loc {}. ", self.agent)
                } else {
                    format!("You arrive at {}. ", self.receptacles[r].name)
                };
                arrive + &self.examine_receptacle(r)
            }
            Action::Open(r) => {
                self.receptacles[r].opened = true;
                let name = &self.receptacles[r].name;
                format!(
                    "You open the {name}. The {name} is open. In it, you see {}.",
                    render_list(&self.names(&self.contents(r)))
                )
            }
            Action::Close(r) => {
                self.receptacles[r].opened = false;
                format!("You close the {}.", self.receptacles[r].name)
            }
            Action::Take(o, r) => {
                self.objects[o].inside = None;
                self.objects[o].at = None;
                self.held = Some(o);
                format!(
                    "You pick up the {} from the {}.",
                    self.objects[o].name, self.receptacles[r].name
                )
            }
            Action::Put(o, r) => {
                self.objects[o].inside = Some(r);
                self.objects[o].at = Some(self.agent);
                self.held = None;
                self.put_text(&self.objects[o].name, &self.receptacles[r].name)
                    .1
            }
            Action::Heat(o, r) => {
                self.objects[o].hot = true;
                self.objects[o].cool = false;
                format!(
                    "You heat the {} using the {}.",
                    self.objects[o].name, self.receptacles[r].name
                )
            }
            Action::Cool(o, r) => {
                self.objects[o].cool = true;
                self.objects[o].hot = false;
                format!(
                    "You cool the {} using the {}.",
                    self.objects[o].name, self.receptacles[r].name
                )
            }
            Action::Clean(o, r) => {
                self.objects[o].clean = true;
                format!(
                    "You clean the {} using the {}.",
                    self.objects[o].name, self.receptacles[r].name
                )
            }
            Action::Use(o) => {
                self.objects[o].toggled = true;
                self.objects[o].on = !self.objects[o].on;
                format!("You turn on the {}.", self.objects[o].name)
            }
            Action::Slice(o, k) => {
                self.objects[o].sliced = true;
                format!(
                    "You sliced the {} with the {}.",
                    self.objects[o].name, self.objects[k].name
                )
            }
            Action::ExamineReceptacle(r) => self.examine_receptacle(r),
            Action::ExamineObject(o) => self.examine_object(o),
            Action::Inventory => match self.held {
                Some(h) => format!("You are carrying: a {}.", self.objects[h].name),
                None => "You are not carrying anything.".to_string(),
            },
            Action::Look => {
                let here: Vec<&str> = self
                    .receptacles
                    .iter()
                    .filter(|r| r.location == self.agent)
                    .map(|r| r.name.as_str())
                    .collect();
                if here.is_empty() {
                    "You are in the middle of a room. Looking quickly around you, you see nothing."
                        .to_string()
                } else {
                    // `[{r.name | …}]`: the grammar's list of names (no article). "Next to it"
                    // lists objects matching `not_inreceptacle(o, r)`, a predicate no state
                    // holds, so it is always "nothing" — also for objects whose
                    // `objectAtLocation` is here while their receptacle is elsewhere (checked
                    // against the engine in tests/alfworld_engine.rs).
                    let names = match here.len() {
                        1 => here[0].to_string(),
                        n => format!("{}, and {}", here[..n - 1].join(", "), here[n - 1]),
                    };
                    format!("You are facing the {names}. Next to it, you see nothing.")
                }
            }
            Action::Help => HELP.to_string(),
        }
    }

    /// Whether the task is solved (checked after every action).
    pub fn won(&self) -> bool {
        let t = &self.task;
        let in_target = |o: &Object| {
            o.inside
                .is_some_and(|r| self.receptacles[r].class == t.receptacle)
                && o.class == t.object
        };
        match t.kind {
            TaskType::PickAndPlace => self.objects.iter().any(in_target),
            TaskType::Clean => self
                .objects
                .iter()
                .any(|o| in_target(o) && o.cleanable && o.clean),
            TaskType::Heat => self
                .objects
                .iter()
                .any(|o| in_target(o) && o.heatable && o.hot),
            TaskType::Cool => self
                .objects
                .iter()
                .any(|o| in_target(o) && o.coolable && o.cool),
            TaskType::PickTwo => (0..self.receptacles.len()).any(|r| {
                self.receptacles[r].class == t.receptacle
                    && self
                        .objects
                        .iter()
                        .filter(|o| o.inside == Some(r) && o.class == t.object)
                        .count()
                        >= 2
            }),
            TaskType::LookAtInLight => {
                let holding = self.held.is_some_and(|h| self.objects[h].class == t.object);
                holding
                    && self.objects.iter().any(|o| {
                        o.class == t.toggle
                            && o.toggleable
                            && o.toggled
                            && o.inside.is_some_and(|r| self.here(r))
                    })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_rendering() {
        assert_eq!(render_list::<&str>(&[]), "nothing");
        assert_eq!(render_list(&["apple 1"]), "a apple 1");
        assert_eq!(render_list(&["apple 1", "egg 2"]), "a apple 1, and a egg 2");
        assert_eq!(
            render_list(&["a 1", "b 1", "c 1"]),
            "a a 1, a b 1, and a c 1"
        );
    }

    #[test]
    fn numbering_pops_from_the_end() {
        let ents: Vec<(String, String)> = ["Cabinet|1", "Cabinet|3", "Cabinet|2", "Apple|9"]
            .iter()
            .map(|id| (id.to_string(), id.split('|').next().unwrap().to_string()))
            .collect();
        let names = number_names(&ents);
        // Sorted: Cabinet|1, Cabinet|2, Cabinet|3 → numbers 3, 2, 1.
        assert_eq!(names, ["cabinet 3", "cabinet 1", "cabinet 2", "apple 1"]);
    }

    fn object(class: &str, name: &str, inside: Option<usize>, at: Option<usize>) -> Object {
        Object {
            id: format!("{class}|1"),
            class: class.into(),
            name: name.into(),
            inside,
            pickupable: true,
            receptacle_object: false,
            hot: false,
            cool: false,
            clean: false,
            sliced: false,
            toggled: false,
            on: false,
            heatable: false,
            coolable: false,
            cleanable: class == "SoapBar",
            sliceable: class == "Apple",
            toggleable: false,
            at,
        }
    }

    /// The engine's rules that differ from a reading of the action names: `clean` only with a
    /// sink basin, `examine` only the held object, `slice` wherever the object is located.
    #[test]
    fn clean_examine_and_slice_follow_the_engine() {
        let rec = |class: &str, name: &str, location: usize, openable: bool| Receptacle {
            id: format!("{class}|1"),
            class: class.into(),
            name: name.into(),
            location,
            openable,
            opened: false,
        };
        let mut w = World {
            receptacles: vec![
                rec("BathtubBasin", "bathtubbasin 1", 1, false),
                rec("SinkBasin", "sinkbasin 1", 1, false),
                rec("Fridge", "fridge 1", 2, true),
            ],
            objects: vec![
                object("SoapBar", "soapbar 1", None, None),
                object("Cloth", "cloth 1", Some(1), Some(1)),
                object("Apple", "apple 1", Some(2), Some(2)),
                object("Knife", "knife 1", Some(1), Some(1)),
            ],
            agent: 1,
            start_location: 0,
            held: Some(0),
            put_grammar: PutGrammar::Move,
            has_help: true,
            arrive_at_loc: false,
            task: Task {
                kind: TaskType::Clean,
                object: "SoapBar".into(),
                receptacle: "Cabinet".into(),
                toggle: String::new(),
                goal: "put a clean soapbar in cabinet".into(),
            },
            can_contain: None,
        };
        let adm = w.admissible();
        assert!(adm.contains(&"clean soapbar 1 with sinkbasin 1".to_string()));
        assert!(
            !adm.iter().any(|a| a.contains("with bathtubbasin")),
            "{adm:?}"
        );
        assert!(adm.contains(&"examine soapbar 1".to_string()));
        assert!(!adm.contains(&"examine cloth 1".to_string()), "{adm:?}");
        assert_eq!(w.execute("examine cloth 1"), "Nothing happens.");
        // Holding the knife at the closed fridge: the apple cannot be taken but can be sliced.
        w.objects[0].inside = Some(1);
        w.objects[0].at = Some(1);
        w.held = Some(3);
        w.objects[3].inside = None;
        w.objects[3].at = None;
        w.agent = 2;
        let adm = w.admissible();
        assert!(
            adm.contains(&"slice apple 1 with knife 1".to_string()),
            "{adm:?}"
        );
        assert!(!adm.iter().any(|a| a.starts_with("take ")), "{adm:?}");
        assert_eq!(
            w.execute("slice apple 1 with knife 1"),
            "You sliced the apple 1 with the knife 1."
        );
        assert_eq!(
            w.execute("help").lines().next(),
            Some("Available commands:")
        );
    }

    #[test]
    fn numbering_follows_the_engines_lowercased_mangled_ids() {
        // `_minus_` sorts before `_plus_` (unmangled, `+` sorts before `-`): the minus id comes
        // first and gets the highest number, as in the engine.
        let ents: Vec<(String, String)> = ["Cabinet|+00.50|+01.00", "Cabinet|-00.50|+01.00"]
            .iter()
            .map(|id| (id.to_string(), "Cabinet".to_string()))
            .collect();
        assert_eq!(number_names(&ents), ["cabinet 1", "cabinet 2"]);
        // A class name that prefixes another: `toilet_bar_…` before `toiletpaperhanger_bar_…`
        // (unmangled, `ToiletPaperHanger|` sorts first); the same for pot/potato and
        // pen/pencil. This is the order of the intro's receptacle list.
        for (short, long) in [
            ("Toilet|+01.00", "ToiletPaperHanger|+00.10"),
            ("Pot|+01.00", "Potato|+00.10"),
            ("Pen|+01.00", "Pencil|+00.10"),
        ] {
            assert!(short > long, "unmangled order is the other way");
            assert!(engine_key(short) < engine_key(long), "{short} / {long}");
        }
        // Case does not count: Fast Downward lowercases the names.
        assert!(engine_key("TVStand|1") > engine_key("Toilet|1"));
        assert_eq!(
            engine_key("Sink|-01.5|+02|SinkBasin"),
            "sink_bar__minus_01_dot_5_bar__plus_02_bar_sinkbasin"
        );
    }
}
