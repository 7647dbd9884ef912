//! A mixed worker whose engine's `decode_moments` give control's `--decode-request-weight auto`
//! a fit (manual/features/decode_weight_fit.md): its own model, loaded directly (not through a
//! proxy) with prompts and answers of varied lengths on its ranks, until the test stops it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use infera_testkit::{SimSpec, http};
use serde_json::json;

/// The worker's id.
pub(crate) const NAME: &str = "mixed-w";

/// The sim: 4 ranks, its context term scaled down tenfold so that prompts of a few thousand
/// tokens move its step time (as in control's own fit test).
pub(crate) fn sim() -> SimSpec {
    SimSpec::mixed(NAME, "w", 4).seed(5).speedup(10.0).params(
        "prefill_batch_ms = 0.5\nprefill_ms_per_token = 0.0\nprefill_ms_per_token2 = 0.0\n\
         context_tokens_per_request = 105000.0\n",
    )
}

/// Lanes of requests running until [`Load::stop`].
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    lanes: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts five lanes on the sim at `url`: three on rank 0, two alternating between ranks 0
/// and 3, so that rank 0's request count and context both vary.
pub(crate) fn load(url: &str) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let lanes = (0..5u64).map(|k| tokio::spawn(lane(url.to_owned(), k, stop.clone()))).collect();
    Load { stop, lanes }
}

impl Load {
    /// Stops the lanes and waits for their last requests.
    pub(crate) async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for lane in self.lanes {
            lane.await.expect("a lane ends cleanly");
        }
    }
}

async fn lane(url: String, k: u64, stop: Arc<AtomicBool>) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let rank = if k < 3 || i.is_multiple_of(2) { 0 } else { 3 };
        // 4 bytes a token; a unique head so no prompt shares a cached prefix.
        let tokens = 1_000 + (k * 7_919 + i * 3_371) % 10_000;
        let text = format!("{k:04}{i:08}") + &"abcd".repeat(usize::try_from(tokens).unwrap_or(1_000) - 3);
        let new_tokens = 200 + (k * 131 + i * 97) % 600;
        let body = json!({"text": text, "routed_dp_rank": rank,
            "sampling_params": {"max_new_tokens": new_tokens, "ignore_eos": true}});
        let (status, out) =
            http::post_json(&format!("{url}/generate"), &body).await.expect("the sim answers");
        assert!(status.is_success(), "{status} {out}");
        i += 1;
    }
}
