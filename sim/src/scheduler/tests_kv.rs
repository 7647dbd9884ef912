//! A decode rank with a KV capacity: the prealloc queue, retraction and resumption.

use std::time::Duration;

use super::*;

/// A decode engine, one rank, one token per step (no speculation) so counts are exact.
fn decode_engine(capacity: u64, reserved: u32) -> Scheduler {
    let params = TimingParams { mtp_acceptance: 1.0, ..TimingParams::default() };
    Scheduler::new(params, 1, 8192, 1, QueueOrder::Fcfs)
        .with_kv_budget(KvBudget { capacity: Some(capacity), reserved_decode_tokens: reserved })
}

fn decode(prompt_tokens: u32, max_new_tokens: u32) -> Admission {
    Admission { rank: 0, prompt_tokens, max_new_tokens, stall_after: None, work: Work::AwaitKv }
}

/// Runs to idle from `now`, after the events `first` the caller took at `now`; a reserved
/// request's KV arrives at once. Every event with its time.
fn run_decode(s: &mut Scheduler, now: Duration, first: Vec<Event>) -> Vec<(Duration, Event)> {
    let mut out: Vec<(Duration, Event)> = first.into_iter().map(|e| (now, e)).collect();
    let mut seen = 0;
    loop {
        while seen < out.len() {
            let (at, e) = out[seen].clone();
            seen += 1;
            if let Event::Preallocated { id } = e {
                out.extend(s.kv_arrived(at, id, 0).into_iter().map(|e| (at, e)));
            }
        }
        let Some(at) = s.next_deadline() else { break };
        out.extend(s.advance(at).into_iter().map(|e| (at, e)));
    }
    out
}

fn time_of(events: &[(Duration, Event)], want: &Event) -> Duration {
    events.iter().find(|(_, e)| e == want).map(|(at, _)| *at).unwrap_or_else(|| panic!("no {want:?}"))
}

fn idle(s: &Scheduler) {
    // The decode moments are running sums: they stay.
    let snap = s.snapshot()[0];
    assert_eq!(
        snap,
        RankSnapshot { decode_moments: snap.decode_moments, ..RankSnapshot::default() },
        "everything drained"
    );
    assert!(s.ids().is_empty());
}

#[test]
fn the_prealloc_queue_admits_in_order_while_the_reservation_fits() {
    // 4096 tokens, 512 reserved each: two 1000-token prompts fit (1000 + 512 each, the second
    // seeing the first's KV and reservation), the third waits.
    let mut s = decode_engine(4096, 512);
    let ids: Vec<ReqId> = (0..4).map(|_| s.submit(Duration::ZERO, decode(1000, 100))).collect();
    let first = s.advance(Duration::ZERO);
    assert_eq!(first, [Event::Preallocated { id: ids[0] }, Event::Preallocated { id: ids[1] }]);
    let snap = s.snapshot()[0];
    assert_eq!((snap.transfer, snap.prealloc, snap.used_tokens), (2, 2, 2000));
    assert_eq!(snap.prealloc_tokens, 2000);
    assert_eq!(snap.awaiting_kv_tokens, 4000, "neither queue has its KV yet");

    let events = run_decode(&mut s, Duration::ZERO, first);
    // FIFO: the third goes before the fourth, each once KV has been freed.
    let done0 = time_of(&events, &Event::Finished { id: ids[0] });
    let pre2 = time_of(&events, &Event::Preallocated { id: ids[2] });
    let pre3 = time_of(&events, &Event::Preallocated { id: ids[3] });
    assert!(pre2 >= done0 && pre3 >= pre2, "{done0:?} {pre2:?} {pre3:?}");
    for id in &ids {
        time_of(&events, &Event::Finished { id: *id });
    }
    idle(&s);
}

#[test]
fn an_unbounded_decode_reserves_at_once() {
    let params = TimingParams { mtp_acceptance: 1.0, ..TimingParams::default() };
    let mut s = Scheduler::new(params, 1, 8192, 1, QueueOrder::Fcfs);
    let ids: Vec<ReqId> = (0..50).map(|_| s.submit(Duration::ZERO, decode(100_000, 10))).collect();
    let first = s.advance(Duration::ZERO);
    assert_eq!(first.len(), 50);
    assert_eq!(s.snapshot()[0].prealloc, 0);
    let events = run_decode(&mut s, Duration::ZERO, first);
    assert_eq!(events.iter().filter(|(_, e)| matches!(e, Event::Finished { .. })).count(), ids.len());
    idle(&s);
}

#[test]
fn a_prompt_beyond_the_capacity_is_aborted() {
    let mut s = decode_engine(1000, 512);
    let id = s.submit(Duration::ZERO, decode(1001, 10));
    assert_eq!(s.advance(Duration::ZERO), [Event::Aborted { id }]);
    idle(&s);
}

/// A (100-token prompt, 1000 out) is admitted alone; B's whole budget fits only once A has
/// generated enough to be retractable; then both grow past 1500 tokens and B, with the fewer
/// outputs, is retracted, resumes after A finishes, and completes.
#[test]
fn the_youngest_request_is_retracted_and_resumes_later() {
    let mut s = decode_engine(1500, 8);
    let a = s.submit(Duration::ZERO, decode(100, 1000));
    assert_eq!(s.advance(Duration::ZERO), [Event::Preallocated { id: a }]);
    assert_eq!(s.kv_arrived(Duration::ZERO, a, 0), [Event::Tokens { id: a, total: 1 }]);
    // A is decoding: B's 1100-token budget fits only beside what A's retraction would free.
    let b = s.submit(Duration::ZERO, decode(100, 1000));
    let mut events: Vec<(Duration, Event)> = Vec::new();
    let mut retracted_seen = false;
    let mut retracted_reported = false;
    let mut now = Duration::ZERO;
    loop {
        let mut batch: Vec<Event> = s.advance(now);
        let mut i = 0;
        while i < batch.len() {
            if let Event::Preallocated { id } = batch[i] {
                let arrived = s.kv_arrived(now, id, 0);
                batch.extend(arrived);
            }
            i += 1;
        }
        events.extend(batch.into_iter().map(|e| (now, e)));
        let snap = s.snapshot()[0];
        assert!(snap.used_tokens <= 1500, "{snap:?}");
        if snap.retracted == 1 {
            retracted_seen = true;
            assert_eq!(snap.running, 1, "A keeps decoding");
            assert_eq!(snap.pending_tokens, s.reqs[&b].context());
        }
        retracted_reported |= snap.retracted_last == 1;
        let Some(at) = s.next_deadline() else { break };
        now = at;
    }
    assert!(retracted_seen && retracted_reported);
    let tokens_of = |id: ReqId| -> u32 {
        events
            .iter()
            .filter_map(|(_, e)| match e {
                Event::Tokens { id: x, total } if *x == id => Some(*total),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    };
    assert_eq!((tokens_of(a), tokens_of(b)), (1000, 1000), "B resumed where it stopped");
    let pre_b = time_of(&events, &Event::Preallocated { id: b });
    assert!(pre_b > Duration::ZERO, "B waited for A to become retractable");
    let done_a = time_of(&events, &Event::Finished { id: a });
    let done_b = time_of(&events, &Event::Finished { id: b });
    assert!(done_a < done_b);
    idle(&s);
    // The decode log clears the retraction count 40 steps after it reported it.
    assert_eq!(s.snapshot()[0].retracted_last, 0);
}

#[test]
fn a_lone_request_that_cannot_grow_is_aborted() {
    // Reserved 0 and a small output budget admit it; then its real output outgrows the pool
    // (as a max_new_tokens larger than the clip estimate would).
    let mut s = decode_engine(105, 0);
    let id = s.submit(Duration::ZERO, decode(100, 5));
    if let Some(req) = s.reqs.get_mut(&id) {
        req.max_new = 50;
    }
    let first = s.advance(Duration::ZERO);
    let events = run_decode(&mut s, Duration::ZERO, first);
    assert!(events.iter().any(|(_, e)| *e == Event::Aborted { id }));
    idle(&s);
}

#[test]
fn removing_a_request_frees_its_reservation_for_the_next() {
    let mut s = decode_engine(2000, 512);
    let a = s.submit(Duration::ZERO, decode(1000, 10));
    let b = s.submit(Duration::ZERO, decode(1000, 10));
    assert_eq!(s.advance(Duration::ZERO), [Event::Preallocated { id: a }]);
    assert!(s.remove(a));
    assert_eq!(s.advance(Duration::from_millis(1)), [Event::Preallocated { id: b }]);
    assert!(s.remove(b));
    idle(&s);
}
