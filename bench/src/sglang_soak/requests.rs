//! What the soak sends: requests drawn from the seed and their index — the model (the PD pair
//! or the aggregated worker), the API, streamed or not, the prompt's length, how many tokens,
//! and whether the client hangs up (after a drawn delay). Pure: the same seed gives the same
//! requests.

use std::time::Duration;

use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::{Value, json};

/// The model served by the PD pair.
pub(crate) const PD_MODEL: &str = "tiny";
/// The model served by the aggregated worker.
pub(crate) const AGG_MODEL: &str = "tiny-agg";

/// Words the prompts are made of (every byte is in the tiny tokenizer's alphabet).
const WORDS: &[&str] = &[
    "The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog.", "What", "is", "capital", "of",
    "France?", "Write", "a", "haiku", "about", "sea.", "Waves", "fold", "into", "foam.",
];

/// The API a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
    /// SGLang's `/generate`.
    Generate,
}

impl Api {
    /// The path.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Self::Chat => "/v1/chat/completions",
            Self::Completions => "/v1/completions",
            Self::Generate => "/generate",
        }
    }
}

/// One request, as drawn.
#[derive(Clone, Debug)]
pub(crate) struct Drawn {
    /// Its index (also its `x-request-id`, `soak-{index}`).
    pub(crate) index: usize,
    /// PD or aggregated.
    pub(crate) pd: bool,
    pub(crate) api: Api,
    pub(crate) stream: bool,
    /// Words in the prompt.
    pub(crate) words: usize,
    /// Tokens asked for (EOS ignored, so exactly these).
    pub(crate) max_tokens: u32,
    /// The client hangs up this long after sending.
    pub(crate) cancel_after: Option<Duration>,
}

/// The shares and ranges requests are drawn from.
#[derive(Clone, Debug)]
pub(crate) struct Mix {
    /// The share sent to the PD pair (the rest to the aggregated worker).
    pub(crate) pd_share: f64,
    pub(crate) stream_share: f64,
    /// The share the client hangs up on, each after a delay up to `cancel_within`.
    pub(crate) cancel_share: f64,
    pub(crate) cancel_within: Duration,
    /// Fewest and most prompt words.
    pub(crate) words: (usize, usize),
    /// Fewest and most tokens asked for.
    pub(crate) tokens: (u32, u32),
}

/// Request `index` of the run seeded `seed`.
pub(crate) fn draw(mix: &Mix, seed: u64, index: usize) -> Drawn {
    let mut rng = SmallRng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let api = match rng.random_range(0..3) {
        0 => Api::Chat,
        1 => Api::Completions,
        _ => Api::Generate,
    };
    let cancel = rng.random_bool(mix.cancel_share);
    let delay = Duration::from_millis(rng.random_range(0..=mix.cancel_within.as_millis() as u64));
    Drawn {
        index,
        pd: rng.random_bool(mix.pd_share),
        api,
        stream: rng.random_bool(mix.stream_share),
        words: rng.random_range(mix.words.0..=mix.words.1),
        max_tokens: rng.random_range(mix.tokens.0..=mix.tokens.1),
        cancel_after: cancel.then_some(delay),
    }
}

impl Drawn {
    /// The served model it asks for.
    pub(crate) fn model(&self) -> &'static str {
        if self.pd { PD_MODEL } else { AGG_MODEL }
    }

    /// Its `x-request-id`.
    pub(crate) fn id(&self) -> String {
        format!("soak-{}", self.index)
    }

    /// Its prompt: `words` words, starting with its index and `route` (a letter per route the
    /// same request is sent on), so that no two prompts share a first page: neither copy of a
    /// request finds the other's prefix in a radix cache.
    pub(crate) fn prompt(&self, route: char) -> String {
        let mut text = format!("{route}{} ", self.index);
        for i in 0..self.words {
            text.push_str(WORDS[(i * 7 + self.index) % WORDS.len()]);
            text.push(' ');
        }
        text
    }

    /// Its JSON body on `route` (see [`Drawn::prompt`]).
    pub(crate) fn body(&self, route: char) -> Value {
        let (model, stream, n) = (self.model(), self.stream, self.max_tokens);
        match self.api {
            Api::Chat => {
                json!({"model": model, "messages": [{"role": "user", "content": self.prompt(route)}],
                "max_tokens": n, "ignore_eos": true, "temperature": 0, "stream": stream})
            }
            Api::Completions => json!({"model": model, "prompt": self.prompt(route), "max_tokens": n,
                "ignore_eos": true, "temperature": 0, "stream": stream}),
            Api::Generate => json!({"model": model, "text": self.prompt(route), "stream": stream,
                "sampling_params": {"max_new_tokens": n, "ignore_eos": true, "temperature": 0}}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix() -> Mix {
        Mix {
            pd_share: 0.5,
            stream_share: 0.5,
            cancel_share: 0.1,
            cancel_within: Duration::from_millis(200),
            words: (10, 300),
            tokens: (8, 64),
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_requests_and_the_mix_holds() {
        let a: Vec<Drawn> = (0..2000).map(|i| draw(&mix(), 7, i)).collect();
        let b: Vec<Drawn> = (0..2000).map(|i| draw(&mix(), 7, i)).collect();
        assert!(a.iter().zip(&b).all(|(x, y)| format!("{x:?}") == format!("{y:?}")));
        let share = |f: &dyn Fn(&Drawn) -> bool| a.iter().filter(|d| f(d)).count() as f64 / a.len() as f64;
        assert!((share(&|d| d.pd) - 0.5).abs() < 0.05);
        assert!((share(&|d| d.stream) - 0.5).abs() < 0.05);
        assert!((share(&|d| d.cancel_after.is_some()) - 0.1).abs() < 0.03);
        assert!(a.iter().all(|d| (8..=64).contains(&d.max_tokens) && (10..=300).contains(&d.words)));
        for api in [Api::Chat, Api::Completions, Api::Generate] {
            assert!(share(&|d| d.api == api) > 0.25, "{api:?}");
        }
        let other: Vec<Drawn> = (0..20).map(|i| draw(&mix(), 8, i)).collect();
        assert!(other.iter().zip(&a).any(|(x, y)| format!("{x:?}") != format!("{y:?}")));
    }

    #[test]
    fn bodies_ask_for_exactly_their_tokens_on_their_model() {
        let d = Drawn {
            index: 3,
            pd: false,
            api: Api::Generate,
            stream: true,
            words: 4,
            max_tokens: 9,
            cancel_after: None,
        };
        let body = d.body('p');
        assert_eq!(body["model"], AGG_MODEL);
        assert_ne!(d.body('d')["text"], body["text"], "each route its own prompt");
        assert_eq!(body["sampling_params"]["max_new_tokens"], 9);
        assert_eq!(body["sampling_params"]["ignore_eos"], true);
        assert_eq!(d.prompt('p').split_whitespace().count(), 5);
        assert_eq!(d.id(), "soak-3");
    }
}
