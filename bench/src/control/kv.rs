//! The KV-aware round: PickPrefill with a 2,000-page prompt's hashes + PickDecode + a Release of
//! each, against control with 8 prefill workers whose publishers (infera-kv's, SGLang's framing)
//! filled its prefix index over ZMQ, and a decode worker of 8 ranks. The baseline is the tonic
//! echo called as often (4 RPCs), the first call with a payload the size of the PickPrefill request.
//!
//! What the index holds: prefill `i` holds a 2,000-page conversation that shares its first
//! `250 × i` pages with the query prompt (8 different overlaps, the search's worst case), and
//! `BACKGROUND` other 2,000-page prompts, so lookups reach into an index of ~650 k blocks.

use std::time::Duration;

use infera_kv::event::{KvEvent, Medium};
use infera_kv::hash::page_hashes;
use infera_kv::publish::{Publisher, PublisherConfig};
use infera_proto::pb::{self, router_client::RouterClient};
use prost::Message as _;
use tonic::transport::Channel;

use super::{ControlArgs, Served, measure, serve};
use crate::echo::{pb::EchoMessage, pb::echo_client::EchoClient};

const PREFILLS: usize = 8;
const PAGES: usize = 2_000;
const PAGE: usize = 16;
const BACKGROUND: usize = 40;

/// Tokens of prompt `seed`, sharing its first `shared` pages with prompt 0.
fn prompt(seed: u32, shared: usize) -> Vec<u32> {
    (0..(PAGES * PAGE) as u32)
        .map(|i| if (i as usize) < shared * PAGE { i } else { seed.wrapping_mul(0x9e37_79b9) ^ i })
        .collect()
}

fn stored(tokens: &[u32]) -> KvEvent {
    KvEvent::BlockStored {
        block_hashes: page_hashes(tokens, PAGE).iter().map(|h| h.0).collect(),
        parent_block_hash: None,
        token_ids: tokens.iter().map(|&t| u64::from(t)).collect(),
        block_size: PAGE as u32,
        medium: Medium::Gpu,
        cache_salt: None,
        lora_name: None,
    }
}

fn pick_request(lease: &str, hashes: &[i64], page_size: u32) -> pb::PickRequest {
    pb::PickRequest {
        lease_id: lease.to_owned(),
        request_id: "bench-request".into(),
        model: "m".into(),
        input_tokens: (PAGES * PAGE) as u64,
        session_key: String::new(),
        page_hashes: Vec::new(),
        fixed_page_hashes: hashes.to_vec(),
        page_size,
        exclude: Vec::new(),
        ..Default::default()
    }
}

/// Round trips per second of each round, in the order run (they alternate).
pub(super) struct Rates {
    /// Echo ×4, per round.
    pub(super) echo: Vec<f64>,
    /// The KV-aware round, per round.
    pub(super) control: Vec<f64>,
    /// The same round with the hashes in the older `int64` field, per round.
    pub(super) varint: Vec<f64>,
    /// The PickPrefill request's encoded size.
    pub(super) prefill_bytes: usize,
}

/// Runs the alternating rounds of echo ×4 and of the KV-aware round.
pub(super) async fn round_trips(args: &ControlArgs) -> anyhow::Result<Rates> {
    let mut publishers = Vec::new();
    let mut workers = String::new();
    for i in 0..PREFILLS {
        let mut config = PublisherConfig::new("tcp://127.0.0.1:0");
        config.replay_endpoint = Some("tcp://127.0.0.1:0".into());
        let p = Publisher::bind(config).await?;
        workers += &format!(
            "[[workers]]\nid='p{i}'\nrole='prefill'\nurl='http://stub'\nmodel='m'\ndp_size=1\npage_size={PAGE}\n\
             kv_events={{ endpoint='tcp://127.0.0.1:{}', replay_endpoint='tcp://127.0.0.1:{}' }}\n",
            p.port(),
            p.replay_port().expect("a replay socket was asked for")
        );
        publishers.push(p);
    }
    // The decode runs the prefills' page size: a decode at another could not pair with them.
    workers += &format!(
        "[[workers]]\nid='d'\nrole='decode'\nurl='http://stub'\nmodel='m'\ndp_size={}\npage_size={PAGE}\n",
        8
    );
    let Served { routers, echoes, lease, _engines } = serve(&workers, args.clients).await?;

    // Fill the index: background prompts first, then each prefill's conversation; once control
    // credits prefill i with all 2,000 pages of its conversation, its events are all in.
    for (i, p) in publishers.iter().enumerate() {
        let mut events = vec![KvEvent::AllBlocksCleared];
        for b in 0..BACKGROUND {
            events.push(stored(&prompt((1 + i * BACKGROUND + b) as u32 * 7919, 0)));
        }
        p.publish(events)?;
        p.publish(vec![stored(&prompt(100_000 + i as u32, 250 * i))])?;
    }
    let mut router = routers[0].clone();
    for i in 0..PREFILLS {
        let own: Vec<i64> =
            page_hashes(&prompt(100_000 + i as u32, 250 * i), PAGE).iter().map(|h| h.0).collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let p = router.pick_prefill(pick_request(&lease, &own, PAGE as u32)).await?.into_inner();
            router
                .release(pb::ReleaseRequest {
                    reservation_id: p.reservation_id,
                    reason: pb::ReleaseReason::Eof as i32,
                    failure: 0,
                })
                .await?;
            if p.cost.is_some_and(|c| c.overlap_pages == PAGES as u32) {
                break;
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "control's index did not fill in 2 minutes"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    let query: Vec<i64> = page_hashes(&prompt(0, 0), PAGE).iter().map(|h| h.0).collect();
    let prefill_req = pick_request(&lease, &query, PAGE as u32);
    let size = prefill_req.encoded_len();
    let round = Duration::from_millis(args.round_ms);
    let echo_trip = move |mut c: EchoClient<Channel>| async move {
        c.echo(EchoMessage { payload: vec![7; size] }).await?;
        for _ in 0..3 {
            c.echo(EchoMessage { payload: vec![7; 64] }).await?;
        }
        Ok(c)
    };
    let decode_req = pb::PickRequest { fixed_page_hashes: Vec::new(), page_size: 0, ..prefill_req.clone() };
    // Clients built before `fixed_page_hashes` send the int64 field: a third side, to show
    // what the fixed-width field saves, measured in the same run.
    let varint_req = pb::PickRequest {
        page_hashes: prefill_req.fixed_page_hashes.clone(),
        fixed_page_hashes: Vec::new(),
        ..prefill_req.clone()
    };
    let trip = |prefill_req: pb::PickRequest| {
        let decode_req = decode_req.clone();
        move |mut c: RouterClient<Channel>| {
            let (prefill_req, decode_req) = (prefill_req.clone(), decode_req.clone());
            async move {
                let prefill = c.pick_prefill(prefill_req).await?.into_inner();
                let decode = c.pick_decode(decode_req).await?.into_inner();
                for id in [prefill.reservation_id, decode.reservation_id] {
                    c.release(pb::ReleaseRequest {
                        reservation_id: id,
                        reason: pb::ReleaseReason::Eof as i32,
                        failure: 0,
                    })
                    .await?;
                }
                Ok(c)
            }
        }
    };
    let (kv_trip, varint_trip) = (trip(prefill_req), trip(varint_req));
    measure(&echoes, round / 4, echo_trip).await?;
    measure(&routers, round / 4, kv_trip.clone()).await?;
    measure(&routers, round / 4, varint_trip.clone()).await?;
    let (mut echo_rates, mut kv_rates, mut varint_rates) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        echo_rates.push(measure(&echoes, round, echo_trip).await?);
        kv_rates.push(measure(&routers, round, kv_trip.clone()).await?);
        varint_rates.push(measure(&routers, round, varint_trip.clone()).await?);
    }
    for p in publishers {
        p.close().await;
    }
    Ok(Rates { echo: echo_rates, control: kv_rates, varint: varint_rates, prefill_bytes: size })
}
