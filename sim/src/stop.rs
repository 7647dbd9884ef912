//! Stop strings over the sim's output text: SGLang ends a request as soon as its decoded text
//! contains one of the request's `stop` strings (`Req.check_finished`,
//! python/sglang/srt/managers/schedule_batch.py), keeps the token that completed it and trims
//! the text before the match. The sim's text is its own words ([`crate::tokens::output_token`]),
//! so a stop string ends a request where those words contain it.

use crate::tokens;

/// Where a stop string matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopHit {
    /// Output tokens up to and including the one that completed the match.
    pub tokens: u32,
    /// The stop string that matched.
    pub matched: String,
}

/// Scans a request's output for its stop strings as tokens come.
#[derive(Debug, Clone)]
pub struct StopScanner {
    stops: Vec<String>,
    seed: u64,
    rid_hash: u64,
    text: String,
    scanned: u32,
}

impl StopScanner {
    /// A scanner for the request with `rid_hash` under `seed`; `None` without stop strings.
    pub fn new(stops: &[String], seed: u64, rid_hash: u64) -> Option<Self> {
        (!stops.is_empty()).then(|| Self {
            stops: stops.to_vec(),
            seed,
            rid_hash,
            text: String::new(),
            scanned: 0,
        })
    }

    /// Scans the output up to `tokens` tokens; the first match, if any.
    pub fn advance(&mut self, tokens: u32) -> Option<StopHit> {
        while self.scanned < tokens {
            let (_, word) = tokens::output_token(self.seed, self.rid_hash, self.scanned);
            if self.scanned > 0 {
                self.text.push(' ');
            }
            self.text.push_str(word);
            self.scanned += 1;
            if let Some(s) = self.stops.iter().find(|s| self.text.contains(s.as_str())) {
                return Some(StopHit { tokens: self.scanned, matched: s.clone() });
            }
        }
        None
    }
}

/// `text` without the stop string and what follows it.
pub fn trim_at(text: &str, stop: &str) -> String {
    text.find(stop).map_or_else(|| text.to_owned(), |i| text[..i].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_token_that_completes_a_stop_string_ends_the_request() {
        let (_, text) = tokens::output(7, 9, 40);
        let word = text.split(' ').nth(3).unwrap().to_owned();
        let mut s = StopScanner::new(std::slice::from_ref(&word), 7, 9).unwrap();
        let hit = s.advance(40).unwrap();
        assert!(hit.tokens <= 4, "{hit:?}");
        assert_eq!(hit.matched, word);
        let (_, upto) = tokens::output(7, 9, hit.tokens);
        assert!(upto.contains(&word));
        assert!(StopScanner::new(&[], 7, 9).is_none());
        let mut never = StopScanner::new(&["zzz".to_owned()], 7, 9).unwrap();
        assert_eq!(never.advance(10), None);
        assert_eq!(never.advance(20), None);
        assert_eq!(trim_at("the cat sat", "cat"), "the ");
        assert_eq!(trim_at("abc", "x"), "abc");
    }
}
