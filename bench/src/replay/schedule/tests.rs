//! The schedules under paused tokio time, with fake sends.

use super::super::trace::Turn;
use super::*;

pub(crate) fn shaping() -> Shaping {
    Shaping {
        speedup: 1.0,
        think_time_scale: 1.0,
        output_scale: 1.0,
        idle_gap_cap_s: 300.0,
        concurrency: 2,
        warmup_per_lane: 0,
        warmup_s: 0.0,
        cut_at_end: false,
        max_requests: None,
        duration_s: None,
        compression: 1.0,
    }
}

fn sessions(n: u64, turns: usize, think_s: f64) -> Vec<Result<Session, TraceError>> {
    (0..n)
        .map(|index| {
            let turn = Turn { at_ms: 0.0, think_s, input_tokens: 1, output_tokens: 1, blocks: vec![] };
            Ok(Session {
                index,
                name: String::new(),
                block_tokens: 512,
                turns: vec![turn; turns],
                subagents: Vec::new(),
            })
        })
        .collect()
}

#[test]
fn open_clock_divides_by_speedup_and_caps_gaps() {
    let mut c = OpenClock::new(&Shaping { speedup: 10.0, idle_gap_cap_s: 60.0, ..shaping() });
    let at: Vec<_> = [1_000.0, 4_000.0, 4_000.0, 1_004_000.0, 1_005_000.0].map(|t| c.next(t)).into();
    let ms: Vec<_> = at.iter().map(Duration::as_millis).collect();
    assert_eq!(ms, vec![0, 300, 300, 6_300, 6_400]);
}

#[test]
fn think_delay_is_capped_then_scaled_and_tokens_scaled() {
    let s = Shaping { think_time_scale: 0.1, idle_gap_cap_s: 300.0, output_scale: 0.5, ..shaping() };
    assert_eq!(s.think_delay(20.0), Duration::from_secs(2));
    assert_eq!(s.think_delay(100_000.0), Duration::from_secs(30));
    assert_eq!((s.max_tokens(101), s.max_tokens(0)), (51, 1));
}

#[tokio::test(start_paused = true)]
async fn lanes_never_exceed_the_concurrency_and_respect_think_time() {
    let inflight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (i, p) = (inflight.clone(), peak.clone());
    let s = Shaping { concurrency: 3, think_time_scale: 0.5, ..shaping() };
    let ran = closed_loop(sessions(7, 4, 10.0).into_iter(), &s, move |job: Job| {
        let (i, p) = (i.clone(), p.clone());
        async move {
            let sent = Instant::now();
            p.fetch_max(i.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(1)).await;
            i.fetch_sub(1, Ordering::SeqCst);
            (job.session.index, job.turn, sent, Instant::now())
        }
    })
    .await;
    assert_eq!(ran.done.len(), 28);
    assert_eq!(peak.load(Ordering::SeqCst), 3);
    for (_, (session, turn, sent, _)) in &ran.done {
        if *turn > 0 {
            let (.., prev_end) =
                ran.done.iter().map(|(_, o)| o).find(|o| o.0 == *session && o.1 == turn - 1).unwrap();
            assert_eq!(*sent - *prev_end, Duration::from_secs(5), "10 s think × 0.5");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn warmup_is_per_lane_and_bounds_stop_issuing() {
    let s = Shaping { concurrency: 2, warmup_per_lane: 2, max_requests: Some(9), ..shaping() };
    let ran =
        closed_loop(sessions(10, 3, 0.0).into_iter(), &s, |_| tokio::time::sleep(Duration::from_secs(1)))
            .await;
    assert_eq!(ran.done.len(), 9);
    assert_eq!(ran.done.iter().filter(|(j, _)| j.warmup).count(), 4);
    let s = Shaping { duration_s: Some(10.5), concurrency: 1, ..shaping() };
    let ran =
        closed_loop(sessions(100, 1, 0.0).into_iter(), &s, |_| tokio::time::sleep(Duration::from_secs(1)))
            .await;
    assert_eq!(ran.done.len(), 11);
}

#[tokio::test(start_paused = true)]
async fn warmup_by_time_and_cut_at_the_end() {
    // One lane, 3 s requests back to back: sent at 0, 3, 6, 9; the run ends at 10 s (emulated
    // 100 s at compression 10), where the request sent at 9 is cut.
    let s = Shaping {
        concurrency: 1,
        warmup_s: 40.0,
        cut_at_end: true,
        duration_s: Some(100.0),
        compression: 10.0,
        ..shaping()
    };
    let ran =
        closed_loop(sessions(1, 100, 0.0).into_iter(), &s, |_| tokio::time::sleep(Duration::from_secs(3)))
            .await;
    let warm: Vec<bool> = ran.done.iter().map(|(j, _)| j.warmup).collect();
    assert_eq!(warm, vec![true, true, false], "sent at 0 and 3 s (< 4 s) are warm-up");
    assert_eq!(ran.cut, 1);
    // A lane thinking at the deadline stops there, not at the end of its think time.
    let s = Shaping { concurrency: 1, duration_s: Some(10.0), ..shaping() };
    let start = Instant::now();
    let ran = closed_loop(sessions(1, 3, 1_000.0).into_iter(), &s, |_| async {}).await;
    assert_eq!((ran.done.len(), Instant::now() - start), (1, Duration::from_secs(10)));
}

#[test]
fn compression_divides_waits() {
    let s = Shaping { think_time_scale: 0.5, compression: 10.0, ..shaping() };
    assert_eq!(s.think_delay(20.0), Duration::from_secs(1));
    let mut c = OpenClock::new(&Shaping { speedup: 2.0, compression: 5.0, ..shaping() });
    assert_eq!((c.next(0.0), c.next(10_000.0)), (Duration::ZERO, Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn subagents_run_concurrently_and_the_parent_waits_for_them() {
    use super::super::trace::SubAgent;
    let turn = |think_s| Turn { at_ms: 0.0, think_s, input_tokens: 1, output_tokens: 1, blocks: vec![] };
    let agent = |index, turns: usize| {
        Arc::new(Session {
            index,
            name: format!("sub{index}"),
            block_tokens: 64,
            turns: vec![turn(1.0); turns],
            subagents: Vec::new(),
        })
    };
    let parent = Session {
        index: 0,
        name: "parent".into(),
        block_tokens: 64,
        turns: vec![turn(0.0), turn(2.0)],
        subagents: vec![
            SubAgent { before_turn: 1, session: agent(1, 3) },
            SubAgent { before_turn: 1, session: agent(2, 1) },
        ],
    };
    let start = Instant::now();
    let s = Shaping { concurrency: 1, ..shaping() };
    let ran = closed_loop(vec![Ok(parent)].into_iter(), &s, move |job: Job| async move {
        let sent = Instant::now() - start;
        tokio::time::sleep(Duration::from_secs(10)).await;
        (job.session.name.clone(), job.turn, sent.as_secs())
    })
    .await;
    let mut at: Vec<_> = ran.done.into_iter().map(|(_, o)| o).collect();
    at.sort_by_key(|o| o.2);
    // Parent turn 0 at 0 s; both sub-agents at 10 s; sub1's turns 1 s after each end; the
    // parent's turn 1 two seconds after the slower sub-agent's last response ends (42 s).
    let want = [
        ("parent", 0, 0),
        ("sub1", 0, 10),
        ("sub2", 0, 10),
        ("sub1", 1, 21),
        ("sub1", 2, 32),
        ("parent", 1, 44),
    ];
    let want: Vec<_> = want.iter().map(|(n, t, s)| ((*n).to_owned(), *t, *s)).collect();
    assert_eq!(at, want);
}

#[tokio::test(start_paused = true)]
async fn open_loop_sends_on_the_compressed_clock() {
    let trace: Vec<_> = [0.0, 3_000.0, 3_000.0, 9_000.0]
        .iter()
        .enumerate()
        .map(|(i, &at_ms)| {
            let turn = Turn { at_ms, think_s: 0.0, input_tokens: 1, output_tokens: 1, blocks: vec![] };
            Ok(Session {
                index: i as u64,
                name: String::new(),
                block_tokens: 512,
                turns: vec![turn],
                subagents: Vec::new(),
            })
        })
        .collect();
    let start = Instant::now();
    let s = Shaping { speedup: 3.0, warmup_per_lane: 1, ..shaping() };
    let ran = open_loop(trace.into_iter(), &s, |_| async move { Instant::now() - start }).await;
    let mut at: Vec<_> = ran.done.iter().map(|(j, d)| (j.session.index, j.warmup, d.as_millis())).collect();
    at.sort();
    assert_eq!(at, vec![(0, true, 0), (1, false, 1_000), (2, false, 1_000), (3, false, 3_000)]);
}
