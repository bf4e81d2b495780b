//! Exact match as Search-R1 / verl-agent score it (spec §3.4).
//!
//! `normalize`: lowercase → drop ASCII punctuation (`string.punctuation`) → the whole words
//! `a|an|the` become a space (`\b(a|an|the)\b`, Unicode word boundaries as in Python 3) →
//! collapse whitespace. EM is 1 if the normalised prediction equals any normalised gold answer.

use regex::Regex;
use std::sync::OnceLock;

/// Python's `string.punctuation`.
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

fn articles() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\b(a|an|the)\b").expect("static regex"))
}

fn answer_tag() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?s)<answer>(.*?)</answer>").expect("static regex"))
}

/// The SQuAD-style normalisation of Search-R1's `normalize_answer`.
pub fn normalize(s: &str) -> String {
    let lower = s.to_lowercase();
    let no_punct: String = lower
        .chars()
        .filter(|c| !PUNCTUATION.contains(*c))
        .collect();
    let no_articles = articles().replace_all(&no_punct, " ");
    // Python's str.split() splits on Unicode whitespace, as char::is_whitespace does.
    no_articles.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// 1.0 if `prediction` matches any gold answer after normalisation, else 0.0.
pub fn exact_match(prediction: &str, golden: &[String]) -> f64 {
    let p = normalize(prediction);
    if golden.iter().any(|g| normalize(g) == p) {
        1.0
    } else {
        0.0
    }
}

/// Which text the answer is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerScope {
    /// verl-agent: the concatenated trajectory (actions and observations); one match suffices.
    Trajectory,
    /// Search-R1: prompt + response, whose prompt itself holds one example `<answer>`, so at
    /// least two matches are needed.
    PromptAndResponse,
}

/// The last `<answer>…</answer>` (DOTALL), stripped; `None` when there is none (or, for
/// [`AnswerScope::PromptAndResponse`], only one).
pub fn extract_answer(text: &str, scope: AnswerScope) -> Option<String> {
    let matches: Vec<_> = answer_tag().captures_iter(text).collect();
    let needed = match scope {
        AnswerScope::Trajectory => 1,
        AnswerScope::PromptAndResponse => 2,
    };
    if matches.len() < needed {
        return None;
    }
    matches.last().map(|c| c[1].trim().to_string())
}

/// The Search QA score: EM of the extracted answer, 0 without one.
pub fn score(text: &str, golden: &[String], scope: AnswerScope) -> f64 {
    extract_answer(text, scope).map_or(0.0, |a| exact_match(&a, golden))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn normalisation_cases() {
        assert_eq!(normalize("The  Beatles!"), "beatles");
        assert_eq!(normalize("  U.S.A. "), "usa");
        assert_eq!(normalize("A Tale of Two Cities"), "tale of two cities");
        // Articles only as whole words: "theater", "another", "Ana" stay.
        assert_eq!(normalize("another theater, Ana"), "another theater ana");
        // Apostrophes are punctuation: "Rock 'n' Roll" → "rock n roll".
        assert_eq!(normalize("Rock 'n' Roll"), "rock n roll");
        // Non-ASCII punctuation is kept (string.punctuation is ASCII); Unicode lowercasing.
        assert_eq!(normalize("ÉCOLE « Normale »"), "école « normale »");
        // An article made by removing punctuation becomes a word: "the-end" → "theend"? No:
        // '-' is removed first, so "the-end" → "theend" (no boundary inside).
        assert_eq!(normalize("the-end"), "theend");
        assert_eq!(normalize("a.b"), "ab");
        assert_eq!(normalize("\tThe\nanswer\u{a0}is "), "answer is");
        assert_eq!(normalize(""), "");
    }

    #[test]
    fn em_any_gold() {
        let gold = g(&["United States", "USA", "the United States of America"]);
        assert_eq!(exact_match("the united states", &gold), 1.0);
        assert_eq!(exact_match("U.S.A.", &gold), 1.0);
        assert_eq!(exact_match("United States of America", &gold), 1.0);
        assert_eq!(exact_match("America", &gold), 0.0);
        assert_eq!(exact_match("", &g(&[""])), 1.0);
        assert_eq!(exact_match("1,000", &g(&["1000"])), 1.0);
        assert_eq!(exact_match("1 000", &g(&["1000"])), 0.0);
    }

    #[test]
    fn answer_extraction() {
        let t = "<think>x</think><answer> Paris </answer> then <answer>\nLyon\n</answer>";
        assert_eq!(
            extract_answer(t, AnswerScope::Trajectory).as_deref(),
            Some("Lyon")
        );
        let one = "prompt ... <answer> Paris </answer>";
        assert_eq!(
            extract_answer(one, AnswerScope::Trajectory).as_deref(),
            Some("Paris")
        );
        assert_eq!(extract_answer(one, AnswerScope::PromptAndResponse), None);
        assert_eq!(
            extract_answer("<answer>unclosed", AnswerScope::Trajectory),
            None
        );
        assert_eq!(score(t, &g(&["lyon"]), AnswerScope::Trajectory), 1.0);
        assert_eq!(
            score("no answer", &g(&["lyon"]), AnswerScope::Trajectory),
            0.0
        );
    }
}
