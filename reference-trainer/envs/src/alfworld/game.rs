//! ALFWorld games: a seeded generator of solvable games from room priors and the canContain
//! table (spec §2.9), with train / valid_seen / valid_unseen splits (seen splits share floor
//! plans, unseen ones use the held-out plans) and the valid_unseen task-type mix; and the loader
//! for real game folders (`game.tw-pddl` + `traj_data.json`, spec §2.1) with a small
//! s-expression parser, plus a writer of that format whose files the real engine loads and
//! plays as this crate does (`tests/alfworld_engine.rs`).

use super::vocab::{self, Room};
use super::world::{
    engine_key, number_names, Object, PutGrammar, Receptacle, Task, TaskType, World,
};
use crate::error::{LoadError, ParseError};
use crate::rng::Rng;
use crate::search_qa::python_json_string;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// A dataset split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// `train` (3,553 games upstream).
    Train,
    /// `valid_seen` / `eval_in_distribution` (140).
    ValidSeen,
    /// `valid_unseen` / `eval_out_of_distribution` (134).
    ValidUnseen,
}

impl Split {
    /// The folder name.
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::ValidSeen => "valid_seen",
            Split::ValidUnseen => "valid_unseen",
        }
    }
}

/// One game: its initial world (with the task) and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Game {
    /// The initial state.
    pub world: World,
    /// `{task_type}-{Object}-None-{Recep}-{scene}` style name (the gamefile path for real games).
    pub name: String,
    /// The ALFRED floor plan number.
    pub floor_plan: u32,
}

/// valid_unseen's task-type counts (pick, clean, heat, cool, look, pick_two), the generator's mix.
const MIX: [(TaskType, u32); 6] = [
    (TaskType::PickAndPlace, 24),
    (TaskType::Clean, 31),
    (TaskType::Heat, 23),
    (TaskType::Cool, 21),
    (TaskType::LookAtInLight, 18),
    (TaskType::PickTwo, 17),
];

fn rooms_for(kind: TaskType) -> &'static [Room] {
    match kind {
        TaskType::PickAndPlace | TaskType::PickTwo => &[
            Room::Kitchen,
            Room::LivingRoom,
            Room::Bedroom,
            Room::Bathroom,
        ],
        TaskType::LookAtInLight => &[Room::LivingRoom, Room::Bedroom],
        TaskType::Clean => &[Room::Kitchen, Room::Bathroom],
        TaskType::Heat | TaskType::Cool => &[Room::Kitchen],
    }
}

/// Floor plans of a room type: seen (train + valid_seen) plans 7–30, unseen plans 1–6.
fn floor_plans(room: Room, split: Split) -> Vec<u32> {
    let base = match room {
        Room::Kitchen => 0,
        Room::LivingRoom => 200,
        Room::Bedroom => 300,
        Room::Bathroom => 400,
    };
    match split {
        Split::ValidUnseen => (1..=6).map(|n| base + n).collect(),
        _ => (7..=30).map(|n| base + n).collect(),
    }
}

fn goal_sentence(kind: TaskType, obj: &str, recep: &str, toggle: &str, second: bool) -> String {
    let (o, r, t) = (
        obj.to_lowercase(),
        recep.to_lowercase(),
        toggle.to_lowercase(),
    );
    match (kind, second) {
        (TaskType::PickAndPlace, false) => format!("put a {o} in {r}"),
        (TaskType::PickAndPlace, true) => format!("put some {o} on {r}"),
        (TaskType::Clean, false) => format!("put a clean {o} in {r}"),
        (TaskType::Clean, true) => format!("clean some {o} and put it in {r}"),
        (TaskType::Heat, false) => format!("put a hot {o} in {r}"),
        (TaskType::Heat, true) => format!("heat some {o} and put it in {r}"),
        (TaskType::Cool, false) => format!("put a cool {o} in {r}"),
        (TaskType::Cool, true) => format!("cool some {o} and put it in {r}"),
        (TaskType::PickTwo, false) => format!("put two {o} in {r}"),
        (TaskType::PickTwo, true) => format!("find two {o} and put them in {r}"),
        (TaskType::LookAtInLight, false) => format!("look at {o} under the {t}"),
        (TaskType::LookAtInLight, true) => format!("examine the {o} with the {t}"),
    }
}

fn coord(rng: &mut Rng) -> String {
    let v = rng.below(1000) as f64 / 100.0 - 5.0;
    format!("{}{:05.2}", if v < 0.0 { '-' } else { '+' }, v.abs())
}

/// An ALFRED object id, `Class|x|y|z`; basins are named after their sink or bathtub as ALFRED
/// does (`Sink|x|y|z|SinkBasin`), which the Demangler turns into `sinkbasin`.
fn entity_id(class: &str, rng: &mut Rng) -> String {
    let (x, y, z) = (coord(rng), coord(rng), coord(rng));
    match class.strip_suffix("Basin") {
        Some(base) => format!("{base}|{x}|{y}|{z}|{class}"),
        None => format!("{class}|{x}|{y}|{z}"),
    }
}

/// An object of `class` in receptacle `inside` at location `at`, with its class's affordances
/// (the facts the generator writes for every object).
fn new_object(id: String, class: &str, inside: Option<usize>, at: Option<usize>) -> Object {
    Object {
        id,
        class: class.to_string(),
        name: String::new(),
        inside,
        pickupable: !vocab::TOGGLEABLE.contains(&class),
        receptacle_object: vocab::RECEPTACLE_OBJECTS.contains(&class),
        hot: false,
        cool: false,
        clean: false,
        sliced: false,
        toggled: false,
        on: false,
        heatable: vocab::HEATABLE.contains(&class),
        coolable: vocab::COOLABLE.contains(&class),
        cleanable: vocab::CLEANABLE.contains(&class),
        sliceable: vocab::SLICEABLE.contains(&class),
        toggleable: vocab::TOGGLEABLE.contains(&class),
        at,
    }
}

/// Sorts entities in the engine's id order ([`engine_key`]) and assigns `class N` names
/// (numbering over receptacles and objects together, per class).
fn finalize(
    receptacles: Vec<Receptacle>,
    mut objects: Vec<Object>,
) -> (Vec<Receptacle>, Vec<Object>) {
    // Sort receptacles by id, remapping the objects' container indices.
    let mut order: Vec<usize> = (0..receptacles.len()).collect();
    order.sort_by_cached_key(|&i| engine_key(&receptacles[i].id));
    let mut new_index = vec![0; receptacles.len()];
    for (new, &old) in order.iter().enumerate() {
        new_index[old] = new;
    }
    let mut sorted: Vec<Receptacle> = order.iter().map(|&i| receptacles[i].clone()).collect();
    for o in objects.iter_mut() {
        o.inside = o.inside.map(|r| new_index[r]);
    }
    objects.sort_by_cached_key(|o| engine_key(&o.id));
    let ents: Vec<(String, String)> = sorted
        .iter()
        .map(|r| (r.id.clone(), r.class.clone()))
        .chain(objects.iter().map(|o| (o.id.clone(), o.class.clone())))
        .collect();
    let names = number_names(&ents);
    for (r, name) in sorted.iter_mut().zip(&names) {
        r.name = name.clone();
    }
    for (o, name) in objects.iter_mut().zip(&names[sorted.len()..]) {
        o.name = name.clone();
    }
    (sorted, objects)
}

/// Generates one solvable game of `split` from `seed`.
pub fn generate(seed: u64, split: Split) -> Game {
    let mut rng = Rng::new(seed ^ 0xA1F_0000);
    let total: u32 = MIX.iter().map(|m| m.1).sum();
    let mut pick = rng.below(total as usize) as u32;
    let kind = MIX
        .iter()
        .find(|(_, w)| {
            if pick < *w {
                true
            } else {
                pick -= w;
                false
            }
        })
        .map_or(TaskType::PickAndPlace, |m| m.0);
    loop {
        if let Some(game) = try_generate(&mut rng, kind, split) {
            return game;
        }
    }
}

fn try_generate(rng: &mut Rng, kind: TaskType, split: Split) -> Option<Game> {
    let rooms = rooms_for(kind);
    let room = rooms[rng.below(rooms.len())];
    let plans = floor_plans(room, split);
    let floor_plan = plans[rng.below(plans.len())];
    // The layout is a function of the floor plan, as the ALFRED scenes are.
    let mut layout = Rng::new(floor_plan as u64 * 7919);
    let mut receptacles: Vec<Receptacle> = Vec::new();
    let mut location = 1; // 0 is the start
    for &(class, lo, hi) in vocab::room_receptacles(room) {
        let n = lo as usize + layout.below((hi - lo) as usize + 1);
        for k in 0..n {
            // Stove burners come in pairs; some cabinets and drawers share a spot.
            let shares = k % 2 == 1
                && (class == "StoveBurner"
                    || ((class == "Cabinet" || class == "Drawer") && layout.below(3) == 0));
            if !shares {
                location += 1;
            }
            receptacles.push(Receptacle {
                id: entity_id(class, &mut layout),
                class: class.to_string(),
                name: String::new(),
                location: location - 1,
                openable: vocab::OPENABLE.contains(&class),
                opened: false,
            });
        }
    }
    let classes: Vec<&str> = receptacles.iter().map(|r| r.class.as_str()).collect();
    let holders = |obj: &str| -> Vec<usize> {
        (0..receptacles.len())
            .filter(|&r| vocab::contains(&receptacles[r].class, obj))
            .collect()
    };
    // Task parameters.
    let objects_here = vocab::room_objects(room);
    let property_ok = |o: &str| match kind {
        TaskType::Clean => vocab::CLEANABLE.contains(&o),
        TaskType::Heat => vocab::HEATABLE.contains(&o),
        TaskType::Cool => vocab::COOLABLE.contains(&o),
        _ => true,
    };
    let candidates: Vec<&str> = objects_here
        .iter()
        .copied()
        .filter(|o| property_ok(o))
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let obj = candidates[rng.below(candidates.len())];
    let appliance = match kind {
        TaskType::Heat => Some("Microwave"),
        TaskType::Cool => Some("Fridge"),
        TaskType::Clean => Some("SinkBasin"),
        _ => None,
    };
    if appliance.is_some_and(|a| !classes.contains(&a)) {
        return None;
    }
    let (recep, toggle) = if kind == TaskType::LookAtInLight {
        (
            String::new(),
            if rng.below(2) == 0 {
                "DeskLamp"
            } else {
                "FloorLamp"
            }
            .to_string(),
        )
    } else {
        let mut targets: Vec<&str> = classes
            .iter()
            .copied()
            .filter(|c| vocab::contains(c, obj) && Some(*c) != appliance)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        if targets.is_empty() {
            return None;
        }
        (targets[rng.below(targets.len())].to_string(), String::new())
    };
    // Where target instances may start: a holder that is not of the target class.
    let starts: Vec<usize> = holders(obj)
        .into_iter()
        .filter(|&r| receptacles[r].class != recep)
        .collect();
    if starts.is_empty() {
        return None;
    }
    let mut objects: Vec<Object> = Vec::new();
    let n_targets = if kind == TaskType::PickTwo {
        2 + rng.below(2)
    } else {
        1 + rng.below(2)
    };
    for _ in 0..n_targets {
        let r = starts[rng.below(starts.len())];
        let at = Some(receptacles[r].location);
        objects.push(new_object(entity_id(obj, rng), obj, Some(r), at));
    }
    if kind == TaskType::LookAtInLight {
        let lamp_spots: Vec<usize> = (0..receptacles.len())
            .filter(|&r| {
                ["SideTable", "Desk", "Dresser", "CoffeeTable", "Shelf"]
                    .contains(&receptacles[r].class.as_str())
            })
            .collect();
        if lamp_spots.is_empty() {
            return None;
        }
        let r = lamp_spots[rng.below(lamp_spots.len())];
        let at = Some(receptacles[r].location);
        objects.push(new_object(entity_id(&toggle, rng), &toggle, Some(r), at));
    }
    // Distractors: other small objects of the room, where they can be.
    let n_distractors = 6 + rng.below(9);
    for _ in 0..n_distractors {
        let class = objects_here[rng.below(objects_here.len())];
        // Keep the target count exact for pick-two and single-target tasks alike.
        if class == obj {
            continue;
        }
        let hs = holders(class);
        if hs.is_empty() {
            continue;
        }
        let r = hs[rng.below(hs.len())];
        let at = Some(receptacles[r].location);
        objects.push(new_object(entity_id(class, rng), class, Some(r), at));
    }
    let goal = goal_sentence(kind, obj, &recep, &toggle, rng.below(2) == 1);
    let (receptacles, objects) = finalize(receptacles, objects);
    let agent = 0;
    let name = format!(
        "{}-{}-None-{}-{}",
        kind.as_str(),
        obj,
        if recep.is_empty() {
            toggle.as_str()
        } else {
            recep.as_str()
        },
        floor_plan
    );
    Some(Game {
        world: World {
            receptacles,
            objects,
            agent,
            start_location: agent,
            held: None,
            put_grammar: PutGrammar::Move,
            has_help: true,
            arrive_at_loc: false,
            task: Task {
                kind,
                object: obj.to_string(),
                receptacle: recep,
                toggle,
                goal,
            },
            can_contain: None,
        },
        name,
        floor_plan,
    })
}

/// `count` games of a split from `seed` (game `i` uses seed `seed·1_000_003 + i`).
pub fn generate_split(split: Split, count: usize, seed: u64) -> Vec<Game> {
    (0..count)
        .map(|i| generate(seed.wrapping_mul(1_000_003).wrapping_add(i as u64), split))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Real game files.

/// An s-expression: an atom or a list.
#[derive(Clone, Debug, PartialEq)]
pub enum Sexp {
    /// A symbol or keyword.
    Atom(String),
    /// A parenthesised list.
    List(Vec<Sexp>),
}

impl Sexp {
    fn atom(&self) -> Option<&str> {
        match self {
            Sexp::Atom(a) => Some(a),
            Sexp::List(_) => None,
        }
    }
    fn list(&self) -> Option<&[Sexp]> {
        match self {
            Sexp::List(l) => Some(l),
            Sexp::Atom(_) => None,
        }
    }
}

/// Parses one s-expression (PDDL; `;` comments skipped).
///
/// # Errors
/// A [`ParseError`] naming the byte offset where the text stops being one balanced
/// expression (or [`ParseError::Empty`] when it holds none).
pub fn parse_sexp(text: &str) -> Result<Sexp, ParseError> {
    let bytes = text.as_bytes();
    // Each open list with the byte offset of its `(`.
    let mut stack: Vec<(usize, Vec<Sexp>)> = Vec::new();
    let mut i = 0;
    let mut done: Option<Sexp> = None;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b';' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'(' => stack.push((i, Vec::new())),
            b')' => {
                let (_, list) = stack
                    .pop()
                    .ok_or(ParseError::UnbalancedClose { offset: i })?;
                match stack.last_mut() {
                    Some((_, parent)) => parent.push(Sexp::List(list)),
                    None => {
                        if done.is_some() {
                            return Err(ParseError::SecondExpression { offset: i });
                        }
                        done = Some(Sexp::List(list));
                    }
                }
            }
            c if c.is_ascii_whitespace() => {}
            _ => {
                let start = i;
                while i < bytes.len()
                    && !bytes[i].is_ascii_whitespace()
                    && bytes[i] != b'('
                    && bytes[i] != b')'
                {
                    i += 1;
                }
                let atom = Sexp::Atom(text[start..i].to_string());
                match stack.last_mut() {
                    Some((_, parent)) => parent.push(atom),
                    None => return Err(ParseError::AtomOutsideList { offset: start }),
                }
                continue;
            }
        }
        i += 1;
    }
    if let Some(&(offset, _)) = stack.first() {
        return Err(ParseError::Unclosed {
            open: stack.len(),
            offset,
        });
    }
    done.ok_or(ParseError::Empty)
}

/// `Apple_bar__minus_01_dot_75` → `Apple|-01.75`.
pub fn unmangle(id: &str) -> String {
    id.replace("_bar_", "|")
        .replace("_minus_", "-")
        .replace("_plus_", "+")
        .replace("_dot_", ".")
        .replace("_comma_", ",")
}

/// `Apple|-01.75` → `Apple_bar__minus_01_dot_75`.
pub fn mangle(id: &str) -> String {
    id.replace('|', "_bar_")
        .replace('-', "_minus_")
        .replace('+', "_plus_")
        .replace('.', "_dot_")
        .replace(',', "_comma_")
}

fn find_section<'a>(define: &'a [Sexp], key: &str) -> Option<&'a [Sexp]> {
    define
        .iter()
        .filter_map(Sexp::list)
        .find(|l| l.first().and_then(Sexp::atom) == Some(key))
}

/// Reads a whole JSON file (`expected`: what it must hold, for the error).
fn read_json(path: &Path, expected: &'static str) -> Result<Value, LoadError> {
    let text = std::fs::read_to_string(path).map_err(LoadError::io(path, "read"))?;
    serde_json::from_str(&text).map_err(|e| LoadError::json(path, None, expected, e))
}

/// A [`LoadError::Game`] about `path`.
fn game_error(path: &Path, reason: impl Into<String>) -> LoadError {
    LoadError::Game {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Loads one game folder (`game.tw-pddl` + `traj_data.json`). `Ok(None)` when the original's
/// filters drop it (`movable`/`Sliced` in the path, a task type outside the six, unsolvable).
///
/// # Errors
/// [`LoadError::Io`] when a file cannot be read, [`LoadError::Json`] when one is not JSON,
/// [`LoadError::Sexp`] when `pddl_problem` does not parse, and [`LoadError::Game`] when the
/// game lacks what it must have (`pddl_problem`, `:init`, a receptacle, a receptacle's
/// location). Each names the file.
pub fn load_game_dir(dir: &Path) -> Result<Option<Game>, LoadError> {
    let path_text = dir.display().to_string();
    if path_text.contains("movable") || path_text.contains("Sliced") {
        return Ok(None);
    }
    let tw_path = dir.join("game.tw-pddl");
    let traj_path = dir.join("traj_data.json");
    let tw = read_json(&tw_path, "a game.tw-pddl JSON object")?;
    let traj = read_json(&traj_path, "a traj_data.json JSON object")?;
    if tw.get("solvable").and_then(Value::as_bool) != Some(true) {
        return Ok(None);
    }
    let Some(kind) = traj
        .get("task_type")
        .and_then(Value::as_str)
        .and_then(TaskType::parse)
    else {
        return Ok(None);
    };
    let problem = tw
        .get("pddl_problem")
        .and_then(Value::as_str)
        .ok_or_else(|| game_error(&tw_path, "no \"pddl_problem\" string"))?;
    let grammar = tw.get("grammar").and_then(Value::as_str).unwrap_or("");
    let sexp = parse_sexp(problem).map_err(|source| LoadError::Sexp {
        path: tw_path.clone(),
        what: "pddl_problem",
        source,
    })?;
    let define = sexp
        .list()
        .ok_or_else(|| game_error(&tw_path, "pddl_problem is not a (define …) list"))?;
    let init = find_section(define, ":init")
        .ok_or_else(|| game_error(&tw_path, "pddl_problem has no :init"))?;
    let params = traj.get("pddl_params").cloned().unwrap_or(Value::Null);
    let param = |k: &str| {
        params
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let world = world_from_facts(
        init,
        grammar,
        kind,
        &param("object_target"),
        &param("parent_target"),
        &param("toggle_target"),
    )
    .map_err(|reason| game_error(&tw_path, reason))?;
    let floor_plan = traj
        .get("scene")
        .and_then(|s| s.get("floor_plan"))
        .and_then(Value::as_str)
        .and_then(|f| f.trim_start_matches("FloorPlan").parse().ok())
        .unwrap_or(0);
    Ok(Some(Game {
        world,
        name: dir
            .file_name()
            .map_or(path_text.clone(), |n| n.to_string_lossy().to_string()),
        floor_plan,
    }))
}

/// Finds every game folder under `root` (recursively) and loads the ones the filters keep.
///
/// # Errors
/// [`LoadError::Io`] naming the folder that cannot be listed, or the first game folder's
/// error ([`load_game_dir`]).
pub fn load_split(root: &Path) -> Result<Vec<Game>, LoadError> {
    let mut games = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    let mut dirs = Vec::new();
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(LoadError::io(&d, "read"))?;
        for e in entries {
            let p = e.map_err(LoadError::io(&d, "read"))?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "game.tw-pddl") {
                dirs.push(d.clone());
            }
        }
    }
    dirs.sort();
    for d in dirs {
        if let Some(g) = load_game_dir(&d)? {
            games.push(g);
        }
    }
    Ok(games)
}

fn world_from_facts(
    init: &[Sexp],
    grammar: &str,
    kind: TaskType,
    object: &str,
    recep: &str,
    toggle: &str,
) -> Result<World, String> {
    let mut rtype: BTreeMap<String, String> = BTreeMap::new();
    let mut otype: BTreeMap<String, String> = BTreeMap::new();
    let mut r_loc: HashMap<String, String> = HashMap::new();
    let mut inside: HashMap<String, String> = HashMap::new();
    let mut o_loc: HashMap<String, String> = HashMap::new();
    let mut can_contain: BTreeSet<(String, String)> = BTreeSet::new();
    let mut flags: HashMap<&str, Vec<String>> = HashMap::new();
    let mut agent_loc = String::new();
    let mut held_id: Option<String> = None;
    for fact in init {
        let Some(items) = fact.list() else { continue };
        let words: Vec<&str> = items.iter().filter_map(Sexp::atom).collect();
        match words.as_slice() {
            ["receptacleType", r, t] => {
                rtype.insert(r.to_string(), t.trim_end_matches("Type").to_string());
            }
            ["objectType", o, t] => {
                otype.insert(o.to_string(), t.trim_end_matches("Type").to_string());
            }
            ["receptacleAtLocation", r, l] => {
                r_loc.insert(r.to_string(), l.to_string());
            }
            ["inReceptacle", o, r] => {
                inside.insert(o.to_string(), r.to_string());
            }
            ["objectAtLocation", o, l] => {
                o_loc.insert(o.to_string(), l.to_string());
            }
            ["canContain", r, o] => {
                can_contain.insert((
                    r.trim_end_matches("Type").to_string(),
                    o.trim_end_matches("Type").to_string(),
                ));
            }
            ["atLocation", "agent1", l] => agent_loc = l.to_string(),
            ["holds", "agent1", o] => held_id = Some(o.to_string()),
            [flag @ ("openable" | "opened" | "pickupable" | "isReceptacleObject" | "isOn"
            | "isToggled" | "isHot" | "isCool" | "isClean" | "isSliced" | "heatable"
            | "coolable" | "cleanable" | "sliceable" | "toggleable"), x] => {
                let key: &str = flag;
                flags.entry(key).or_default().push(x.to_string());
            }
            _ => {}
        }
    }
    let has = |flag: &str, x: &str| flags.get(flag).is_some_and(|v| v.iter().any(|y| y == x));
    // Receptacles are entities with a receptacle type and no object type.
    let rec_ids: Vec<&String> = rtype.keys().filter(|r| !otype.contains_key(*r)).collect();
    if rec_ids.is_empty() {
        return Err("no receptacle in :init".into());
    }
    let mut locations: BTreeMap<&str, usize> = BTreeMap::new();
    locations.insert(agent_loc.as_str(), 0);
    let mut receptacles = Vec::new();
    let mut rec_index: HashMap<&str, usize> = HashMap::new();
    for r in &rec_ids {
        let loc = r_loc
            .get(*r)
            .ok_or_else(|| format!("receptacle {r} has no receptacleAtLocation"))?;
        let next = locations.len();
        let l = *locations.entry(loc.as_str()).or_insert(next);
        rec_index.insert(r.as_str(), receptacles.len());
        let class = rtype[*r].clone();
        receptacles.push(Receptacle {
            id: unmangle(r),
            openable: has("openable", r),
            opened: has("opened", r),
            class,
            name: String::new(),
            location: l,
        });
    }
    let mut objects = Vec::new();
    for (o, class) in &otype {
        // An object inside a receptacle object sits, for us, in that object's receptacle.
        let mut container = inside.get(o);
        let mut hops = 0;
        while let Some(c) = container {
            if rec_index.contains_key(c.as_str()) || hops > 4 {
                break;
            }
            container = inside.get(c);
            hops += 1;
        }
        let at = o_loc.get(o).map(|l| {
            let next = locations.len();
            *locations.entry(l.as_str()).or_insert(next)
        });
        let mut obj = new_object(
            unmangle(o),
            class,
            container.and_then(|c| rec_index.get(c.as_str()).copied()),
            at,
        );
        obj.pickupable = has("pickupable", o);
        obj.receptacle_object = has("isReceptacleObject", o);
        obj.on = has("isOn", o);
        obj.toggled = has("isToggled", o);
        obj.hot = has("isHot", o);
        obj.cool = has("isCool", o);
        obj.clean = has("isClean", o);
        obj.sliced = has("isSliced", o);
        obj.heatable = has("heatable", o);
        obj.coolable = has("coolable", o);
        obj.cleanable = has("cleanable", o);
        obj.sliceable = has("sliceable", o);
        obj.toggleable = has("toggleable", o);
        // An object outside every receptacle (a floor lamp on the floor) cannot be taken,
        // used or put, but it is an entity of the engine and takes a number of its class.
        objects.push(obj);
    }
    let (receptacles, objects) = finalize(receptacles, objects);
    let held = held_id.and_then(|h| {
        let id = unmangle(&h);
        objects.iter().position(|o| o.id == id)
    });
    let agent = 0;
    let all_classes: Vec<&String> = rtype.values().chain(otype.values()).collect();
    let camel = |lower: &str| -> String {
        all_classes
            .iter()
            .find(|c| c.eq_ignore_ascii_case(lower))
            .map_or_else(|| lower.to_string(), |c| c.to_string())
    };
    let (object_c, recep_c, toggle_c) = (camel(object), camel(recep), camel(toggle));
    let goal = grammar_goal(grammar)
        .unwrap_or_else(|| goal_sentence(kind, &object_c, &recep_c, &toggle_c, false));
    Ok(World {
        receptacles,
        objects,
        agent,
        start_location: agent,
        held,
        put_grammar: if grammar.contains("in/on") && !grammar.contains("You move the") {
            PutGrammar::PutInOn
        } else {
            PutGrammar::Move
        },
        has_help: grammar.contains("Available commands") || !grammar.contains("in/on"),
        arrive_at_loc: grammar.contains("You arrive at loc"),
        task: Task {
            kind,
            object: object_c,
            receptacle: recep_c,
            toggle: toggle_c,
            goal,
        },
        can_contain: Some(std::sync::Arc::new(can_contain)),
    })
}

/// The task sentence baked into a game's grammar (`Your task is to: …`).
fn grammar_goal(grammar: &str) -> Option<String> {
    let i = grammar.find("Your task is to: ")? + "Your task is to: ".len();
    let rest = &grammar[i..];
    let end = rest.find(['"', '\n', '#']).unwrap_or(rest.len());
    let goal = rest[..end].trim().trim_end_matches('.').trim();
    (!goal.is_empty()).then(|| goal.to_string())
}

/// The game logic every `game.tw-pddl` embeds: the PDDL domain and the TWL2 grammar of the
/// alfworld release (`alfworld/data/alfred.pddl` and `alfworld/data/alfred.twl2` in the
/// `alfworld` wheel, or `$ALFWORLD_DATA/logic/`). The texts are the user's copy, read from
/// disk, so the files written carry exactly the logic of the engine that plays them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GameLogic {
    /// `alfred.pddl`, verbatim.
    pub pddl_domain: String,
    /// `alfred.twl2`, verbatim (its task rule says `UNKNOWN GOAL`).
    pub grammar: String,
}

impl GameLogic {
    /// Reads `alfred.pddl` and `alfred.twl2` from `dir`.
    ///
    /// # Errors
    /// [`LoadError::Io`] naming the file that cannot be read; [`LoadError::Game`] naming
    /// `alfred.twl2` when it has no `UNKNOWN GOAL` placeholder for the task sentence.
    pub fn from_dir(dir: &Path) -> Result<Self, LoadError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(LoadError::io(&path, "read"))
        };
        let logic = Self {
            pddl_domain: read("alfred.pddl")?,
            grammar: read("alfred.twl2")?,
        };
        if !logic.grammar.contains("UNKNOWN GOAL") {
            return Err(game_error(
                &dir.join("alfred.twl2"),
                "no `UNKNOWN GOAL` placeholder for the task sentence",
            ));
        }
        Ok(logic)
    }
}

/// The goal of a task type, as `alfworld/gen/goal_library.py` writes it into the problem (with
/// ALFRED's `#` → `-` typing fix), closing the `(define …)`.
fn goal_pddl(task: &Task) -> String {
    let (obj, recep, toggle) = (&task.object, &task.receptacle, &task.toggle);
    let property = |affordance: &str, state: &str| {
        format!(
            "
        (:goal
            (and
                (exists (?r - receptacle)
                    (exists (?o - object)
                        (and
                            ({affordance} ?o)
                            (objectType ?o {obj}Type)
                            (receptacleType ?r {recep}Type)
                            ({state} ?o)
                            (inReceptacle ?o ?r)
                        )
                    )
                )
            )
        )
    )
    "
        )
    };
    match task.kind {
        TaskType::PickAndPlace => format!(
            "
        (:goal
            (and
                (exists (?r - receptacle)
                    (exists (?o - object)
                        (and
                            (inReceptacle ?o ?r)
                            (objectType ?o {obj}Type)
                            (receptacleType ?r {recep}Type)
                        )
                    )
                )
            )
        )
    )
    "
        ),
        TaskType::Clean => property("cleanable", "isClean"),
        TaskType::Heat => property("heatable", "isHot"),
        TaskType::Cool => property("coolable", "isCool"),
        TaskType::PickTwo => format!(
            "
                (:goal
                    (and
                        (exists (?r - receptacle)
                            (exists (?o1 - object)
                                (and
                                    (objectType ?o1 {obj}Type)
                                    (receptacleType ?r {recep}Type)
                                    (inReceptacle ?o1 ?r)
                                    (exists (?o2 - object)
                                        (and
                                            (not (= ?o1 ?o2))
                                            (objectType ?o2 {obj}Type)
                                            (receptacleType ?r {recep}Type)
                                            (inReceptacle ?o2 ?r)
                                        )
                                    )
                                )
                            )
                        )
                    )
                )
            )
            "
        ),
        TaskType::LookAtInLight => format!(
            "
        (:goal
             (and
                 (exists (?ot - object
                          ?r - receptacle
                          ?a - agent
                          ?l - location)
                     (and
                         (objectType ?ot {toggle}Type)
                         (toggleable ?ot)
                         (isToggled ?ot)
                         (receptacleAtLocation ?r ?l)
                         (atLocation ?a ?l)
                         (inReceptacle ?ot ?r)
                     )
                 )
                 (exists (?o - object
                          ?a - agent)
                     (and
                         (objectType ?o {obj}Type)
                         (holds ?a ?o)
                     )
                 )
             )
        )
    )
    "
        ),
    }
}

/// Every object class the generator knows (for the problem's `…Type - otype` constants).
fn object_classes() -> BTreeSet<&'static str> {
    let mut all: BTreeSet<&'static str> = BTreeSet::new();
    for room in [
        Room::Kitchen,
        Room::LivingRoom,
        Room::Bedroom,
        Room::Bathroom,
    ] {
        all.extend(vocab::room_objects(room).iter().copied());
    }
    all.extend(vocab::TOGGLEABLE);
    all.extend(vocab::RECEPTACLE_OBJECTS);
    all.extend(["Knife", "ButterKnife"]);
    all
}

/// The ALFRED problem (`initial_state.pddl`) of a world: ALFRED's layout (objects, `…Type`
/// constants, the `:init` facts in the order its writer emits them, the goal-library goal),
/// with mangled ids and `loc|x|z|rotation|horizon` locations, plus the `pickupable` and
/// `canContain` facts the alfworld domain's actions need.
pub fn problem_pddl(w: &World, problem_id: &str) -> String {
    let loc = |l: usize| mangle(&format!("loc|{l}|0|0|30"));
    let objects: Vec<String> = w.objects.iter().map(|o| mangle(&o.id)).collect();
    let receptacles: Vec<String> = w.receptacles.iter().map(|r| mangle(&r.id)).collect();
    let mut locations: Vec<usize> = w.receptacles.iter().map(|r| r.location).collect();
    locations.extend(w.objects.iter().filter_map(|o| o.at));
    locations.sort_unstable();
    locations.dedup();
    locations.retain(|&l| l != w.agent);
    let nl = "\n        ";
    let mut objs = vec!["agent1 - agent".to_string()];
    objs.extend(object_classes().iter().map(|c| format!("{c}Type - otype")));
    objs.extend(
        vocab::RECEPTACLE_CLASSES
            .iter()
            .map(|c| format!("{c}Type - rtype")),
    );
    let mut middle: Vec<String> = objects.iter().map(|o| format!("{o} - object")).collect();
    middle.extend(receptacles.iter().map(|r| format!("{r} - receptacle")));
    middle.extend(locations.iter().map(|&l| format!("{} - location", loc(l))));
    middle.push(format!("{} - location", loc(w.agent)));
    let mut init: Vec<String> = Vec::new();
    for (r, rec) in w.receptacles.iter().enumerate() {
        init.push(format!(
            "(receptacleType {} {}Type)",
            receptacles[r], rec.class
        ));
    }
    for (o, obj) in w.objects.iter().enumerate() {
        init.push(format!("(objectType {} {}Type)", objects[o], obj.class));
    }
    let flag = |init: &mut Vec<String>, name: &str, on: &dyn Fn(&Object) -> bool| {
        for (o, obj) in w.objects.iter().enumerate() {
            if on(obj) {
                init.push(format!("({name} {})", objects[o]));
            }
        }
    };
    flag(&mut init, "isReceptacleObject", &|o| o.receptacle_object);
    for (r, rec) in w.receptacles.iter().enumerate() {
        if rec.openable {
            init.push(format!("(openable {})", receptacles[r]));
        }
    }
    init.push(format!("(atLocation agent1 {})", loc(w.agent)));
    for (r, rec) in w.receptacles.iter().enumerate() {
        if rec.opened {
            init.push(format!("(opened {})", receptacles[r]));
        }
    }
    flag(&mut init, "cleanable", &|o| o.cleanable);
    flag(&mut init, "isClean", &|o| o.clean);
    flag(&mut init, "heatable", &|o| o.heatable);
    flag(&mut init, "coolable", &|o| o.coolable);
    flag(&mut init, "isHot", &|o| o.hot);
    flag(&mut init, "isCool", &|o| o.cool);
    flag(&mut init, "toggleable", &|o| o.toggleable);
    flag(&mut init, "isOn", &|o| o.on);
    flag(&mut init, "isToggled", &|o| o.toggled);
    flag(&mut init, "sliceable", &|o| o.sliceable);
    flag(&mut init, "isSliced", &|o| o.sliced);
    for (o, obj) in w.objects.iter().enumerate() {
        if let Some(r) = obj.inside {
            init.push(format!("(inReceptacle {} {})", objects[o], receptacles[r]));
        }
    }
    let mut at: Vec<String> = w
        .receptacles
        .iter()
        .enumerate()
        .map(|(r, rec)| {
            format!(
                "(receptacleAtLocation {} {})",
                receptacles[r],
                loc(rec.location)
            )
        })
        .collect();
    at.sort();
    init.extend(at);
    for (o, obj) in w.objects.iter().enumerate() {
        if let Some(l) = obj.at {
            init.push(format!("(objectAtLocation {} {})", objects[o], loc(l)));
        }
    }
    if let Some(h) = w.held {
        init.push("(holdsAny agent1)".to_string());
        init.push(format!("(holds agent1 {})", objects[h]));
    }
    flag(&mut init, "pickupable", &|o| o.pickupable);
    let rclasses: BTreeSet<&str> = w.receptacles.iter().map(|r| r.class.as_str()).collect();
    let oclasses: BTreeSet<&str> = w.objects.iter().map(|o| o.class.as_str()).collect();
    for r in &rclasses {
        for o in &oclasses {
            let holds = match &w.can_contain {
                Some(set) => set.contains(&(r.to_string(), o.to_string())),
                None => vocab::contains(r, o),
            };
            if holds {
                init.push(format!("(canContain {r}Type {o}Type)"));
            }
        }
    }
    format!(
        "\n(define (problem plan_{problem_id})\n    (:domain alfred)\n    (:objects\n        {}\n        \n        {}\n        )\n    \n\n    (:init\n        {}\n        )\n    \n{}",
        objs.join(nl),
        middle.join(nl),
        init.join(nl),
        goal_pddl(&w.task)
    )
}

/// Writes `contents` to `path` through a temporary file in the same folder and a rename, so a
/// reader never sees half a file.
fn write_atomic(path: &Path, contents: &str) -> Result<(), LoadError> {
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().to_string());
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, contents).map_err(LoadError::io(&tmp, "write"))?;
    std::fs::rename(&tmp, path).map_err(LoadError::io(path, "write"))
}

/// The `game.tw-pddl` text of a game, byte for byte as `alfworld-generate` writes it
/// (`json.dump` of `pddl_domain`, `grammar` with the task sentence in place of `UNKNOWN GOAL`,
/// `pddl_problem`, `solvable`, `walkthrough`). `walkthrough` is the expert's solution (`None`:
/// unsolvable, written as `"solvable": false, "walkthrough": null`).
pub fn game_file_text(game: &Game, logic: &GameLogic, walkthrough: Option<&[String]>) -> String {
    let w = &game.world;
    let grammar = logic.grammar.replace("UNKNOWN GOAL", &w.task.goal);
    let problem = problem_pddl(w, &game.name.replace(['/', ' '], "_"));
    let walk = match walkthrough {
        Some(cmds) => format!(
            "[{}]",
            cmds.iter()
                .map(|c| python_json_string(c))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "null".to_string(),
    };
    format!(
        "{{\"pddl_domain\": {}, \"grammar\": {}, \"pddl_problem\": {}, \"solvable\": {}, \"walkthrough\": {walk}}}",
        python_json_string(&logic.pddl_domain),
        python_json_string(&grammar),
        python_json_string(&problem),
        if walkthrough.is_some() { "true" } else { "false" },
    )
}

/// The expert's commands for a game (200 steps at most, as `alfworld-generate`'s expert), or
/// `None` when it does not win.
pub fn expert_walkthrough(game: &Game) -> Option<Vec<String>> {
    let mut env = super::AlfworldEnv::new(vec![game.clone()]).ok()?;
    env.max_steps = 200;
    let episode = crate::run_expert_episode(&mut env, 0, 0, None);
    episode.won.then(|| {
        episode
            .steps
            .iter()
            .map(|s| s.action.action.clone())
            .collect()
    })
}

/// Writes a game in the real format, loadable by the real engine (`AlfredTWEnv`): a
/// `game.tw-pddl` as [`game_file_text`] (with the expert's walkthrough) and a `traj_data.json`
/// with the fields the engine and `alfworld-generate` read (`task_type`, `pddl_params`,
/// `scene`, `turk_annotations`).
///
/// # Errors
/// [`LoadError::Io`] naming the folder or file that cannot be created or written.
pub fn write_game_dir(game: &Game, dir: &Path, logic: &GameLogic) -> Result<(), LoadError> {
    std::fs::create_dir_all(dir).map_err(LoadError::io(dir, "create"))?;
    let w = &game.world;
    let walkthrough = expert_walkthrough(game);
    write_atomic(
        &dir.join("game.tw-pddl"),
        &game_file_text(game, logic, walkthrough.as_deref()),
    )?;
    let traj = json!({
        "task_type": w.task.kind.as_str(),
        "pddl_params": {
            "object_target": w.task.object,
            "parent_target": w.task.receptacle,
            "toggle_target": w.task.toggle,
            "mrecep_target": "",
            "object_sliced": false
        },
        "scene": {"floor_plan": format!("FloorPlan{}", game.floor_plan)},
        "turk_annotations": {"anns": [{"task_desc": w.task.goal}]}
    });
    let traj_path = dir.join("traj_data.json");
    let text = serde_json::to_string_pretty(&traj)
        .map_err(|e| LoadError::io(&traj_path, "write")(e.into()))?;
    write_atomic(&traj_path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected strings are Python 3.11's `json.dumps(s)` (the `json.dump` of
    /// `alfworld-generate`, `ensure_ascii=True`).
    #[test]
    fn strings_are_written_as_python_json_dump_writes_them() {
        for (s, python) in [
            ("a\"b\\c\nd\te\r", r#""a\"b\\c\nd\te\r""#),
            (
                "caf\u{e9} \u{2014} \u{1F600}",
                r#""caf\u00e9 \u2014 \ud83d\ude00""#,
            ),
            ("\u{0}\u{1f}\u{7f}\u{8}\u{c}", r#""\u0000\u001f\u007f\b\f""#),
            ("/<>&'", r#""/<>&'""#),
        ] {
            assert_eq!(python_json_string(s), python, "{s:?}");
        }
    }

    #[test]
    fn basins_are_named_after_their_sink() {
        let mut rng = Rng::new(1);
        let id = entity_id("SinkBasin", &mut rng);
        assert!(
            id.starts_with("Sink|") && id.ends_with("|SinkBasin"),
            "{id}"
        );
        let id = entity_id("BathtubBasin", &mut rng);
        assert!(
            id.starts_with("Bathtub|") && id.ends_with("|BathtubBasin"),
            "{id}"
        );
        assert_eq!(entity_id("Cabinet", &mut rng).split('|').count(), 4);
    }

    #[test]
    fn game_logic_needs_the_goal_placeholder() {
        let dir = tempfile::tempdir().unwrap();
        let pddl = dir.path().join("alfred.pddl");
        let err = GameLogic::from_dir(dir.path()).unwrap_err();
        assert!(
            matches!(&err, LoadError::Io { path, action: "read", .. } if path == &pddl),
            "{err:?}"
        );
        assert!(
            err.to_string().contains(&pddl.display().to_string()),
            "{err}"
        );
        std::fs::write(&pddl, "(define (domain alfred))").unwrap();
        let twl2 = dir.path().join("alfred.twl2");
        std::fs::write(&twl2, "no placeholder").unwrap();
        let err = GameLogic::from_dir(dir.path()).unwrap_err();
        assert!(
            matches!(&err, LoadError::Game { path, reason } if path == &twl2 && reason.contains("UNKNOWN GOAL")),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("{}: ", twl2.display())),
            "{err}"
        );
        std::fs::write(&twl2, "Your task is to: UNKNOWN GOAL.").unwrap();
        assert_eq!(
            GameLogic::from_dir(dir.path()).unwrap().pddl_domain,
            "(define (domain alfred))"
        );
    }

    #[test]
    fn sexp_errors_name_the_byte_offset() {
        let ok = parse_sexp("; c\n(define (a b) ; ) in a comment\n c)").unwrap();
        let Sexp::List(items) = ok else {
            panic!("a list")
        };
        assert_eq!(items.len(), 3);
        for (text, expected) in [
            (")", ParseError::UnbalancedClose { offset: 0 }),
            ("(a (b))  )", ParseError::UnbalancedClose { offset: 9 }),
            ("(a) (b)", ParseError::SecondExpression { offset: 6 }),
            ("(a) b", ParseError::AtomOutsideList { offset: 4 }),
            ("x (a)", ParseError::AtomOutsideList { offset: 0 }),
            ("  (a (b", ParseError::Unclosed { open: 2, offset: 2 }),
            ("", ParseError::Empty),
            (" ; (a)\n", ParseError::Empty),
        ] {
            let err = parse_sexp(text).unwrap_err();
            assert_eq!(err, expected, "{text:?}");
            if let Some(at) = err.offset() {
                assert!(err.to_string().contains(&format!("byte {at}")), "{err}");
            }
        }
    }

    #[test]
    fn unsolvable_games_are_written_as_alfworld_generate_writes_them() {
        let game = generate(5, Split::ValidSeen);
        let logic = GameLogic {
            pddl_domain: "D".into(),
            grammar: "Your task is to: UNKNOWN GOAL.".into(),
        };
        let text = game_file_text(&game, &logic, None);
        assert!(text.starts_with(&format!(
            "{{\"pddl_domain\": \"D\", \"grammar\": \"Your task is to: {}.\", \"pddl_problem\": \"\\n(define (problem plan_",
            game.world.task.goal
        )));
        assert!(text.ends_with("\"solvable\": false, \"walkthrough\": null}"));
        let walk = vec!["go to fridge 1".to_string(), "look".to_string()];
        let text = game_file_text(&game, &logic, Some(&walk));
        assert!(
            text.ends_with("\"solvable\": true, \"walkthrough\": [\"go to fridge 1\", \"look\"]}")
        );
    }
}
