//! Lucene's `PorterStemmer` (what Anserini's `PorterStemFilter` runs): Martin Porter's reference
//! implementation of the 1980 algorithm, on UTF-16 code units as Java's `char[]`. Written here
//! because the `porter-stemmer` crate differs from it: in step 4 it falls through from a
//! matching suffix whose condition fails to a shorter one (`statement`, `treatment`, `element`
//! lose `ent`; Lucene keeps them whole), measured by `tests/webshop_lucene_parity.rs`.

struct Stemmer {
    b: Vec<u16>,
    k: usize,
    j: usize,
}

const fn u(c: char) -> u16 {
    c as u16
}

impl Stemmer {
    fn cons(&self, i: usize) -> bool {
        match self.b[i] {
            x if x == u('a') || x == u('e') || x == u('i') || x == u('o') || x == u('u') => false,
            x if x == u('y') => i == 0 || !self.cons(i - 1),
            _ => true,
        }
    }

    /// The number of VC sequences in `b[0..=j]` (`j` may be "-1": `None`).
    fn m(&self) -> usize {
        let Some(j) = self.j_opt() else { return 0 };
        let mut n = 0;
        let mut i = 0;
        loop {
            if i > j {
                return n;
            }
            if !self.cons(i) {
                break;
            }
            i += 1;
        }
        i += 1;
        loop {
            loop {
                if i > j {
                    return n;
                }
                if self.cons(i) {
                    break;
                }
                i += 1;
            }
            i += 1;
            n += 1;
            loop {
                if i > j {
                    return n;
                }
                if !self.cons(i) {
                    break;
                }
                i += 1;
            }
            i += 1;
        }
    }

    // `j` is a Java int that can be -1 (a suffix as long as the word); stored shifted by one.
    fn j_opt(&self) -> Option<usize> {
        self.j.checked_sub(1)
    }

    fn vowel_in_stem(&self) -> bool {
        self.j_opt().is_some_and(|j| (0..=j).any(|i| !self.cons(i)))
    }

    fn doublec(&self, j: usize) -> bool {
        j >= 1 && self.b[j] == self.b[j - 1] && self.cons(j)
    }

    fn cvc(&self, i: usize) -> bool {
        if i < 2 || !self.cons(i) || self.cons(i - 1) || !self.cons(i - 2) {
            return false;
        }
        let ch = self.b[i];
        !(ch == u('w') || ch == u('x') || ch == u('y'))
    }

    fn ends(&mut self, s: &str) -> bool {
        let l = s.len();
        if l > self.k + 1 {
            return false;
        }
        let o = self.k + 1 - l;
        if !s
            .bytes()
            .enumerate()
            .all(|(i, c)| self.b[o + i] == c as u16)
        {
            return false;
        }
        self.j = o; // = (k - l) + 1
        true
    }

    fn setto(&mut self, s: &str) {
        let o = self.j; // j + 1 in Java terms
        self.b.truncate(o);
        self.b.extend(s.bytes().map(u16::from));
        self.k = self.b.len() - 1;
    }

    fn r(&mut self, s: &str) {
        if self.m() > 0 {
            self.setto(s);
        }
    }

    fn step1(&mut self) {
        if self.b[self.k] == u('s') {
            if self.ends("sses") {
                self.k -= 2;
            } else if self.ends("ies") {
                self.setto("i");
            } else if self.b[self.k - 1] != u('s') {
                self.k -= 1;
            }
            self.b.truncate(self.k + 1);
        }
        if self.ends("eed") {
            if self.m() > 0 {
                self.k -= 1;
            }
        } else if (self.ends("ed") || self.ends("ing")) && self.vowel_in_stem() {
            self.k = self.j - 1;
            self.b.truncate(self.k + 1);
            if self.ends("at") {
                self.setto("ate");
            } else if self.ends("bl") {
                self.setto("ble");
            } else if self.ends("iz") {
                self.setto("ize");
            } else if self.doublec(self.k) {
                let ch = self.b[self.k];
                if !(ch == u('l') || ch == u('s') || ch == u('z')) {
                    self.k -= 1;
                }
            } else if self.m_at_k() == 1 && self.cvc(self.k) {
                self.j = self.k + 1;
                self.setto("e");
            }
        }
        self.b.truncate(self.k + 1);
    }

    /// `m()` with `j = k` (Java's step 1 calls it right after `k = j`).
    fn m_at_k(&mut self) -> usize {
        self.j = self.k + 1;
        self.m()
    }

    fn step2(&mut self) {
        if self.ends("y") && self.vowel_in_stem() {
            let k = self.k;
            self.b[k] = u('i');
        }
    }

    fn first_of(&mut self, pairs: &[(&str, &str)]) {
        for &(from, to) in pairs {
            if self.ends(from) {
                self.r(to);
                return;
            }
        }
    }

    fn step3(&mut self) {
        if self.k == 0 {
            return;
        }
        let pairs: &[(&str, &str)] = match char::from_u32(u32::from(self.b[self.k - 1])) {
            Some('a') => &[("ational", "ate"), ("tional", "tion")],
            Some('c') => &[("enci", "ence"), ("anci", "ance")],
            Some('e') => &[("izer", "ize")],
            Some('l') => &[
                ("bli", "ble"),
                ("alli", "al"),
                ("entli", "ent"),
                ("eli", "e"),
                ("ousli", "ous"),
            ],
            Some('o') => &[("ization", "ize"), ("ation", "ate"), ("ator", "ate")],
            Some('s') => &[
                ("alism", "al"),
                ("iveness", "ive"),
                ("fulness", "ful"),
                ("ousness", "ous"),
            ],
            Some('t') => &[("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")],
            Some('g') => &[("logi", "log")],
            _ => return,
        };
        self.first_of(pairs);
    }

    fn step4(&mut self) {
        let pairs: &[(&str, &str)] = match char::from_u32(u32::from(self.b[self.k])) {
            Some('e') => &[("icate", "ic"), ("ative", ""), ("alize", "al")],
            Some('i') => &[("iciti", "ic")],
            Some('l') => &[("ical", "ic"), ("ful", "")],
            Some('s') => &[("ness", "")],
            _ => return,
        };
        self.first_of(pairs);
    }

    fn step5(&mut self) {
        if self.k == 0 {
            return;
        }
        let suffixes: &[&str] = match char::from_u32(u32::from(self.b[self.k - 1])) {
            Some('a') => &["al"],
            Some('c') => &["ance", "ence"],
            Some('e') => &["er"],
            Some('i') => &["ic"],
            Some('l') => &["able", "ible"],
            Some('n') => &["ant", "ement", "ment", "ent"],
            Some('o') => {
                if self.ends("ion")
                    && self
                        .j_opt()
                        .is_some_and(|j| self.b[j] == u('s') || self.b[j] == u('t'))
                {
                    return self.cut_if_m_gt_1();
                }
                &["ou"]
            }
            Some('s') => &["ism"],
            Some('t') => &["ate", "iti"],
            Some('u') => &["ous"],
            Some('v') => &["ive"],
            Some('z') => &["ize"],
            _ => return,
        };
        // The first suffix that matches decides, whether or not its condition then holds.
        if suffixes.iter().any(|s| self.ends(s)) {
            self.cut_if_m_gt_1();
        }
    }

    fn cut_if_m_gt_1(&mut self) {
        if self.m() > 1 {
            self.k = self.j - 1;
            self.b.truncate(self.j);
        }
    }

    fn step6(&mut self) {
        self.j = self.k + 1;
        if self.b[self.k] == u('e') {
            let a = self.m();
            if a > 1 || (a == 1 && !self.cvc(self.k - 1)) {
                self.k -= 1;
            }
        }
        if self.b[self.k] == u('l') && self.doublec(self.k) && self.m() > 1 {
            self.k -= 1;
        }
        self.b.truncate(self.k + 1);
    }
}

/// Lucene's `PorterStemmer.stem` of one (lowercased) term; terms of one or two code units stay.
pub fn stem(term: &str) -> String {
    let b: Vec<u16> = term.encode_utf16().collect();
    if b.len() <= 2 {
        return term.to_string();
    }
    let k = b.len() - 1;
    let mut s = Stemmer { b, k, j: 0 };
    s.step1();
    if s.k >= 1 {
        s.step2();
        s.step3();
        s.step4();
        s.step5();
        s.step6();
    }
    String::from_utf16_lossy(&s.b[..=s.k])
}

#[cfg(test)]
mod tests {
    /// Anserini 0.14.3's analyzer on these words (`tests/java/LuceneOracle.java analyze`).
    #[test]
    fn stems_as_lucene() {
        let words = "statement treatment element running hiking caresses ponies relational \
                     generalization hopeful goodness adjustment women sky dying agreed feed \
                     controll ies oscillators";
        let lucene = "statement treatment element run hike caress poni relat gener hope good \
                      adjust women sky dy agre feed control i oscil";
        let ours: Vec<String> = words.split_whitespace().map(super::stem).collect();
        assert_eq!(ours, lucene.split_whitespace().collect::<Vec<_>>());
    }
}
