//! Goodput: the requests that met both targets of their service class (TTFT and per-request
//! ITL), per second of the measured window, and their tokens. A replay with `--batch-share F`
//! marks each session `batch` or `interactive` by its index (the same sessions in every arm)
//! and names the class in `x-infera-service-class` (and in SMG's `x-smg-priority`); the targets are control's built-in classes
//! (`manual/features/service_classes.md`). A request that failed (a shed 503 included) meets
//! nothing.

use serde_json::{Value, json};

/// A request's service class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// TTFT 2 s, ITL 50 ms.
    Interactive,
    /// TTFT 60 s, ITL 250 ms.
    Batch,
}

impl Class {
    /// The class of session `index` when a share `batch_share` of the sessions are batch: a
    /// fixed hash of the index, so every arm and run sees the same mix.
    pub(crate) fn of(index: u64, batch_share: f64) -> Self {
        let h = index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
        if (h as f64 / (1u64 << 53) as f64) < batch_share { Class::Batch } else { Class::Interactive }
    }

    /// The header value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Class::Interactive => "interactive",
            Class::Batch => "batch",
        }
    }

    /// SMG's class for it (`x-smg-priority`, its priority scheduler's built-in classes).
    pub(crate) fn smg_priority(self) -> &'static str {
        match self {
            Class::Interactive => "interactive",
            Class::Batch => "bulk",
        }
    }

    /// (TTFT, ITL) targets, ms.
    pub(crate) fn targets_ms(self) -> (f64, f64) {
        match self {
            Class::Interactive => (2_000.0, 50.0),
            Class::Batch => (60_000.0, 250.0),
        }
    }

    /// Whether `s` (emulated ms) met both targets; a one-token answer has no ITL to miss.
    fn met(self, s: &Served) -> bool {
        let (ttft, itl) = self.targets_ms();
        s.ttft_ms <= ttft && s.itl_ms.is_none_or(|i| i <= itl)
    }
}

/// What goodput needs of one completed request (emulated ms).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Served {
    pub(crate) class: Option<Class>,
    pub(crate) ttft_ms: f64,
    /// Per-token ITL (`None` below two tokens).
    pub(crate) itl_ms: Option<f64>,
    /// Input + output tokens.
    pub(crate) tokens: u64,
}

/// One class's goodput.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ClassGoodput {
    /// Completed requests of the class.
    pub(crate) completed: usize,
    /// Of those, the ones that met both targets.
    pub(crate) met: usize,
    /// Met per second of the window.
    pub(crate) per_s: f64,
    /// Input + output tokens of the met requests per second.
    pub(crate) tokens_per_s: f64,
}

/// Goodput per class.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Goodput {
    pub(crate) interactive: ClassGoodput,
    pub(crate) batch: ClassGoodput,
}

impl Goodput {
    /// Over `samples` (emulated) in a window of `window_s`; `None` for a replay without classes.
    pub(crate) fn of(samples: &[Served], window_s: f64) -> Option<Self> {
        if samples.iter().all(|s| s.class.is_none()) {
            return None;
        }
        let rate = |n: f64| if window_s > 0.0 { n / window_s } else { 0.0 };
        let of = |class: Class| {
            let mine: Vec<&Served> = samples.iter().filter(|s| s.class == Some(class)).collect();
            let met: Vec<&&Served> = mine.iter().filter(|s| class.met(s)).collect();
            let tokens: u64 = met.iter().map(|s| s.tokens).sum();
            ClassGoodput {
                completed: mine.len(),
                met: met.len(),
                per_s: rate(met.len() as f64),
                tokens_per_s: rate(tokens as f64),
            }
        };
        Some(Self { interactive: of(Class::Interactive), batch: of(Class::Batch) })
    }

    /// Requests that met their targets, per second, over both classes.
    pub(crate) fn per_s(&self) -> f64 {
        self.interactive.per_s + self.batch.per_s
    }

    pub(crate) fn json(&self) -> Value {
        let one = |c: &ClassGoodput| json!({"completed": c.completed, "met": c.met, "per_s": c.per_s, "tokens_per_s": c.tokens_per_s});
        json!({
            "interactive": one(&self.interactive),
            "batch": one(&self.batch),
            "targets": "interactive TTFT ≤ 2 s and ITL ≤ 50 ms; batch TTFT ≤ 60 s and ITL ≤ 250 ms (emulated)",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_follows_the_share_and_goodput_counts_only_what_met_both_targets() {
        let batch = (0..10_000).filter(|i| Class::of(*i, 0.3) == Class::Batch).count();
        assert!((2_800..=3_200).contains(&batch), "{batch}");
        assert!((0..100).all(|i| Class::of(i, 0.0) == Class::Interactive));
        let s =
            |class, ttft_ms, itl_ms| Served { class: Some(class), ttft_ms, itl_ms: Some(itl_ms), tokens: 10 };
        let samples = [
            s(Class::Interactive, 1_000.0, 40.0),
            s(Class::Interactive, 3_000.0, 40.0),
            s(Class::Interactive, 1_000.0, 60.0),
            s(Class::Batch, 30_000.0, 200.0),
        ];
        let g = Goodput::of(&samples, 2.0).unwrap();
        assert_eq!((g.interactive.completed, g.interactive.met, g.batch.met), (3, 1, 1));
        assert_eq!((g.per_s(), g.interactive.tokens_per_s), (1.0, 5.0));
        let unnamed = Served { class: None, ttft_ms: 1.0, itl_ms: None, tokens: 1 };
        assert!(Goodput::of(&[unnamed], 1.0).is_none());
    }
}
