//! Progress as plain log lines, for work that draws no progress bar: a CLI phase whose stderr
//! is not a terminal, and `ablate`'s parallel runs (whose bars would overwrite each other).

use std::time::{Duration, Instant};

/// How often a phase writes a plain progress line where no bar is drawn.
pub const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(60);

/// One phase's plain progress: [`PlainProgress::advance`] gives a [`progress_line`] at most
/// once per interval.
#[derive(Clone, Debug)]
pub struct PlainProgress {
    phase: String,
    total: usize,
    start: Instant,
    last: Instant,
    every: Duration,
}

impl PlainProgress {
    /// A phase of `total` units begins now; a line at most every `every`.
    pub fn begin(phase: &str, total: usize, every: Duration) -> Self {
        let now = Instant::now();
        Self {
            phase: phase.to_string(),
            total,
            start: now,
            last: now,
            every,
        }
    }

    /// `done` units are done: the line to write, when `every` has passed since the last one
    /// (or since the phase began).
    pub fn advance(&mut self, done: usize) -> Option<String> {
        if self.last.elapsed() < self.every {
            return None;
        }
        self.last = Instant::now();
        Some(progress_line(
            &self.phase,
            done,
            self.total,
            self.start.elapsed(),
        ))
    }
}

/// `  sft 1200/2752 (43.6 %), 25:13 elapsed, eta 32:36`: a phase's progress as a log line (the
/// eta from the pace so far; none before the first unit is done).
pub fn progress_line(phase: &str, done: usize, total: usize, elapsed: Duration) -> String {
    let clock = |d: Duration| {
        let s = d.as_secs();
        if s >= 3600 {
            format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
        } else {
            format!("{}:{:02}", s / 60, s % 60)
        }
    };
    let pct = 100.0 * done as f64 / total.max(1) as f64;
    let eta = if done == 0 || done >= total {
        String::new()
    } else {
        let left = elapsed.as_secs_f64() * (total - done) as f64 / done as f64;
        format!(", eta {}", clock(Duration::from_secs_f64(left)))
    };
    format!(
        "  {phase} {done}/{total} ({pct:.1} %), {} elapsed{eta}",
        clock(elapsed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_progress_line_says_where_the_phase_is_and_when_it_ends() {
        let s = Duration::from_secs;
        assert_eq!(
            progress_line("sft", 1200, 2752, s(25 * 60 + 13)),
            "  sft 1200/2752 (43.6 %), 25:13 elapsed, eta 32:36"
        );
        // Hours; no eta before the first unit or after the last.
        assert_eq!(
            progress_line("pretrain", 0, 986, s(3725)),
            "  pretrain 0/986 (0.0 %), 1:02:05 elapsed"
        );
        assert_eq!(
            progress_line("eval", 200, 200, s(59)),
            "  eval 200/200 (100.0 %), 0:59 elapsed"
        );
        // A phase of no units does not divide by zero.
        assert_eq!(
            progress_line("x", 0, 0, s(0)),
            "  x 0/0 (0.0 %), 0:00 elapsed"
        );
    }

    #[test]
    fn a_phase_writes_at_most_one_line_per_interval() {
        let mut p = PlainProgress::begin("sft", 10, Duration::from_secs(3600));
        assert_eq!(p.advance(1), None);
        assert_eq!(p.advance(2), None);
        let mut p = PlainProgress::begin("sft", 10, Duration::ZERO);
        let line = p.advance(5).unwrap();
        assert!(
            line.starts_with("  sft 5/10 (50.0 %), 0:00 elapsed"),
            "{line}"
        );
        assert!(p.advance(6).is_some());
    }
}
