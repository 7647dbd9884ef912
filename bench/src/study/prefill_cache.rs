//! What the prefills' prefix caches saved over a run: the prompt tokens of the prefill legs
//! that finished and how many of them a cache already held (each prefill sim's
//! `GET /sim/requests`, warm-up included). With one prefill only the cache's size decides it;
//! with several, the router's prefill pick does: a session sent back to the prefill that holds
//! its conversation is computed once.

use infera_testkit::http::get_ok;
use serde_json::{Value, json};

/// The prefills' cache use over one run, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PrefillCache {
    /// Prompt tokens of the finished prefill legs.
    pub(crate) prompt_tokens: u64,
    /// Of those, the tokens a prefix cache held.
    pub(crate) cached_tokens: u64,
    /// Finished prefill legs.
    pub(crate) legs: u64,
}

impl PrefillCache {
    /// Reads every prefill sim's request log at `urls`.
    pub(crate) async fn read(urls: &[String]) -> anyhow::Result<Self> {
        let mut sum = Self::default();
        for url in urls {
            let log: Value = serde_json::from_str(&get_ok(&format!("{url}/sim/requests")).await?)?;
            sum.add(&log);
        }
        Ok(sum)
    }

    /// Adds the finished legs of one sim's log.
    fn add(&mut self, log: &Value) {
        for e in log.as_array().into_iter().flatten().filter(|e| e["outcome"] == "ok") {
            self.prompt_tokens += e["prompt_tokens"].as_u64().unwrap_or(0);
            self.cached_tokens += e["cached_tokens"].as_u64().unwrap_or(0);
            self.legs += 1;
        }
    }

    /// The share of prompt tokens the caches held (`None` without a finished leg).
    pub(crate) fn hit_ratio(&self) -> Option<f64> {
        (self.prompt_tokens > 0).then(|| self.cached_tokens as f64 / self.prompt_tokens as f64)
    }

    /// For `study.json`.
    pub(crate) fn json(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "legs": self.legs,
            "hit_ratio": self.hit_ratio(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_finished_legs_count() {
        let mut c = PrefillCache::default();
        c.add(&json!([
            {"outcome": "ok", "prompt_tokens": 1000, "cached_tokens": 750},
            {"outcome": "failed", "prompt_tokens": 5000, "cached_tokens": 0},
            {"outcome": "ok", "prompt_tokens": 1000, "cached_tokens": 250},
        ]));
        assert_eq!(c, PrefillCache { prompt_tokens: 2000, cached_tokens: 1000, legs: 2 });
        assert_eq!(c.hit_ratio(), Some(0.5));
        assert_eq!(PrefillCache::default().hit_ratio(), None);
    }
}
