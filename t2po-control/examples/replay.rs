//! Replays recorded decode steps through the Rust kernel (the `Sequence` API, not the C ABI) and
//! prints what it decides at each step: the engine adapters' tests (python/tests) record the raw
//! logits an engine produced and the tokens it emitted, and compare the adapter's TTI decisions
//! inside the engine with these.
//!
//! Input (stdin), one generation per `seq` block:
//! ```text
//! set <config field> <value>...     (applied to Config::paper(), in order; `queue` takes ids)
//! seq
//! prompt <token ids>...
//! step <emitted token> <the row's raw f32 logits as 8-digit hex bit patterns>...
//! end
//! ```
//! Output, per block: one `step <t> <event> <forced_token>` line per step, then
//! `phi <Φ>` (or `phi none` when the turn has no token in Φ).
//!
//! Run: `cargo run -q -p t2po-control --example replay < steps.txt`

use std::io::{self, BufRead, Write};

use t2po_control::{Config, Error, Sequence, ThinkStart};

fn set_field(cfg: &mut Config, name: &str, values: &[&str]) -> Result<(), String> {
    let one = || -> Result<&str, String> {
        match values {
            [v] => Ok(*v),
            _ => Err(format!("{name}: expected one value, got {}", values.len())),
        }
    };
    let u = |s: &str| s.parse::<u32>().map_err(|e| format!("{name} = {s}: {e}"));
    let f = |s: &str| s.parse::<f32>().map_err(|e| format!("{name} = {s}: {e}"));
    match name {
        "queue" => {
            if values.len() > cfg.queue.len() {
                return Err(format!(
                    "queue: {} ids, at most {}",
                    values.len(),
                    cfg.queue.len()
                ));
            }
            cfg.queue = [0; 8];
            for (slot, v) in cfg.queue.iter_mut().zip(values) {
                *slot = u(v)?;
            }
            cfg.queue_len = values.len() as u32;
        }
        "alpha" => cfg.alpha = f(one()?)?,
        "range_eps" => cfg.range_eps = f(one()?)?,
        "epsilon" => cfg.epsilon = f(one()?)?,
        "patience_tol" => cfg.patience_tol = f(one()?)?,
        "phi_floor" => cfg.phi_floor = f(one()?)?,
        "eta" => cfg.eta = f(one()?)?,
        _ => {
            let v = u(one()?)?;
            let slot = match name {
                "top_j" => &mut cfg.top_j,
                "entropy_norm" => &mut cfg.entropy_norm,
                "entropy_term" => &mut cfg.entropy_term,
                "confidence_norm" => &mut cfg.confidence_norm,
                "confidence_term" => &mut cfg.confidence_term,
                "tti_enabled" => &mut cfg.tti_enabled,
                "trigger" => &mut cfg.trigger,
                "window" => &mut cfg.window,
                "patience" => &mut cfg.patience,
                "min_len" => &mut cfg.min_len,
                "max_think" => &mut cfg.max_think,
                "think_open" => &mut cfg.think_open,
                "think_close" => &mut cfg.think_close,
                "tds_enabled" => &mut cfg.tds_enabled,
                "turn_mean" => &mut cfg.turn_mean,
                "phi_skip" => &mut cfg.phi_skip,
                "tds_rule" => &mut cfg.tds_rule,
                "max_resamples" => &mut cfg.max_resamples,
                "keep" => &mut cfg.keep,
                _ => return Err(format!("unknown config field `{name}`")),
            };
            *slot = v;
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut cfg = Config::paper();
    let mut seq: Option<Sequence> = None;
    let mut row = Vec::new();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for (n, line) in io::stdin().lock().lines().enumerate() {
        let line = line?;
        let mut words = line.split_ascii_whitespace();
        let at = |e: String| format!("line {}: {e}", n + 1);
        match words.next() {
            None => {}
            Some("set") => {
                let name = words
                    .next()
                    .ok_or_else(|| at("set without a field".into()))?;
                let values: Vec<&str> = words.collect();
                set_field(&mut cfg, name, &values).map_err(at)?;
            }
            Some("seq") => {
                seq = Some(Sequence::new(&cfg).map_err(|e| at(e.to_string()))?);
            }
            Some("prompt") => {
                let s = seq
                    .as_mut()
                    .ok_or_else(|| at("prompt outside a seq block".into()))?;
                let tokens = words
                    .map(str::parse::<u32>)
                    .collect::<Result<Vec<_>, _>>()?;
                s.accept_prompt(&tokens).map_err(|e| at(e.to_string()))?;
                s.begin_generation(ThinkStart::FromPrompt);
            }
            Some("step") => {
                let s = seq
                    .as_mut()
                    .ok_or_else(|| at("step outside a seq block".into()))?;
                let token: u32 = words
                    .next()
                    .ok_or_else(|| at("step without a token".into()))?
                    .parse()?;
                row.clear();
                for w in words {
                    row.push(f32::from_bits(u32::from_str_radix(w, 16)?));
                }
                let step = s.observe_row(&row).map_err(|e| at(e.to_string()))?;
                writeln!(
                    out,
                    "step {} {} {}",
                    step.position, step.event, step.forced_token
                )?;
                s.accept(token).map_err(|e| at(e.to_string()))?;
            }
            Some("end") => {
                let s = seq
                    .take()
                    .ok_or_else(|| at("end outside a seq block".into()))?;
                match s.turn_signal() {
                    Ok(phi) => writeln!(out, "phi {phi:e}")?,
                    Err(Error::EmptyTurn) => writeln!(out, "phi none")?,
                    Err(e) => return Err(at(e.to_string()).into()),
                }
            }
            Some(other) => return Err(at(format!("unknown record `{other}`")).into()),
        }
    }
    out.flush()?;
    Ok(())
}
