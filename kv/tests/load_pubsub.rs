//! The load socket end to end: our publisher's frames reach `follow_load` decoded, and the
//! publisher sends a changed reading at once and an unchanged one only on the heartbeat.

use std::time::{Duration, Instant};

use infera_kv::load::{HEARTBEAT, LoadMessage, LoadPublisher, LoadStat, follow_load};
use tokio::sync::mpsc;
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn readings_reach_the_subscriber() {
    let mut publisher = LoadPublisher::bind("tcp://127.0.0.1:0").await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel::<LoadMessage>();
    let endpoint = format!("tcp://127.0.0.1:{}", publisher.port());
    let follower = tokio::spawn(follow_load(endpoint, move |m| {
        let _ = tx.send(m);
    }));
    // ZMQ's slow joiner: publish changing readings until one arrives.
    let mut running = 0;
    let first = timeout(WAIT, async {
        loop {
            running += 1;
            let stat = LoadStat { num_running_reqs: running, attn_dp_rank: Some(0), ..LoadStat::default() };
            assert!(publisher.offer(stat, Instant::now()).await, "a changed reading goes out at once");
            if let Ok(Some(m)) = timeout(Duration::from_millis(50), rx.recv()).await {
                return m;
            }
        }
    })
    .await
    .expect("a reading arrives");
    assert!(first.stat.num_running_reqs >= 1 && first.stat.num_running_reqs <= running);
    assert_eq!(first.stat.attn_dp_rank, Some(0));

    let now = Instant::now();
    let stat = LoadStat { num_running_reqs: 1000, num_total_tokens: 7, ..LoadStat::default() };
    assert!(publisher.offer(stat, now).await);
    assert!(!publisher.offer(stat, now + HEARTBEAT / 2).await, "unchanged: held until the heartbeat");
    assert!(publisher.offer(stat, now + HEARTBEAT).await, "the heartbeat re-sends it");
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let m = timeout(WAIT, rx.recv()).await.expect("both copies arrive").unwrap();
        if m.stat == stat {
            seen.push(m.seq);
        }
    }
    assert_eq!(seen[1], seen[0] + 1, "one seq per message sent");
    follower.abort();
    publisher.close().await;
}
