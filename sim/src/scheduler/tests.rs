use std::time::Duration;

use super::*;

fn engine(ranks: usize, order: QueueOrder) -> Scheduler {
    Scheduler::new(TimingParams::default(), ranks, 8192, 1, order)
}

/// An aggregated request.
fn prefill(rank: usize, prompt: &[u32], max_new: u32) -> Admission {
    Admission {
        rank,
        prompt_tokens: prompt.len() as u32,
        max_new_tokens: max_new,
        stall_after: None,
        work: Work::Prefill { pages: PromptPages::new(prompt, 1, false, None), hold: false },
    }
}

fn prompt(len: u32, salt: u32) -> Vec<u32> {
    (0..len).map(|i| i.wrapping_mul(31).wrapping_add(salt << 20)).collect()
}

/// Runs until idle; returns every event with its model time.
fn run(s: &mut Scheduler) -> Vec<(Duration, Event)> {
    let mut out = Vec::new();
    while let Some(at) = s.next_deadline() {
        out.extend(s.advance(at).into_iter().map(|e| (at, e)));
    }
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn time_of(events: &[(Duration, Event)], want: &Event) -> Duration {
    events.iter().find(|(_, e)| e == want).map(|(at, _)| *at).unwrap_or_else(|| panic!("no {want:?}"))
}

#[test]
fn an_idle_engine_has_nothing_due() {
    let mut s = engine(2, QueueOrder::Fcfs);
    assert_eq!(s.next_deadline(), None);
    assert!(s.advance(Duration::from_secs(10)).is_empty());
}

#[test]
fn one_request_prefills_then_decodes_at_the_acceptance_rate() {
    let mut s = engine(1, QueueOrder::Fcfs);
    let id = s.submit(Duration::ZERO, prefill(0, &prompt(1000, 0), 16));
    let events = run(&mut s);
    let first = time_of(&events, &Event::Tokens { id, total: 1 });
    assert!((ms(first) - (5.0 + 0.06 * 1000.0 + 2e-6 * 1e6)).abs() < 1e-6);
    let totals: Vec<u32> = events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Tokens { total, .. } => Some(*total),
            _ => None,
        })
        .collect();
    // 1, then 1 + floor(k · 3.61): 4, 8, 11, 15, then capped at 16.
    assert_eq!(totals, [1, 4, 8, 11, 15, 16]);
    let second = time_of(&events, &Event::Tokens { id, total: 4 });
    let step = timing::step_ms_at(&TimingParams::default(), 1.0 + 1001.0 / 1.05e6);
    assert!((ms(second - first) - step).abs() < 1e-6);
    assert!(matches!(events.last(), Some((_, Event::Finished { .. }))));
    assert_eq!(s.next_deadline(), None, "idle after the last token");
}

#[test]
fn decode_steps_are_lockstep_and_paced_by_the_busiest_rank() {
    let mut s = engine(2, QueueOrder::Fcfs);
    let rank0: Vec<ReqId> =
        (0..9).map(|i| s.submit(Duration::ZERO, prefill(0, &prompt(10, i), 100))).collect();
    let rank1 = s.submit(Duration::ZERO, prefill(1, &prompt(10, 100), 100));
    // Let both ranks finish prefill and start decoding.
    let mut steps = Vec::new();
    while let Some(at) = s.next_deadline() {
        let events = s.advance(at);
        if events.iter().any(|e| matches!(e, Event::Tokens { id, total } if *id == rank1 && *total > 1)) {
            // Rank 0's requests advance in the same steps as rank 1's.
            assert!(events.iter().any(|e| matches!(e, Event::Tokens { id, .. } if *id == rank0[8])));
            steps.push(at);
        }
    }
    assert!(steps.len() >= 3);
    let x = 9.0 + 9.0 * 10.0 / 1.05e6;
    let gap = ms(steps[2] - steps[1]);
    assert!(gap > timing::step_ms_at(&TimingParams::default(), x), "{gap}");
    assert!(gap < 49.6, "{gap}");
}

#[test]
fn a_prefix_cache_hit_shortens_prefill() {
    let mut s = engine(1, QueueOrder::Fcfs);
    let p = prompt(4000, 1);
    let a = s.submit(Duration::ZERO, prefill(0, &p, 1));
    let cold = run(&mut s);
    assert_eq!(cold[0].1, Event::Prefilled { id: a, cached_tokens: 0 });
    let start = Duration::from_secs(100);
    let b = s.submit(start, prefill(0, &p, 1));
    let warm = run(&mut s);
    assert_eq!(warm[0].1, Event::Prefilled { id: b, cached_tokens: 3999 });
    assert!(ms(warm[0].0 - start) < ms(cold[0].0) / 10.0);
    s.flush_cache();
    let c = s.submit(Duration::from_secs(200), prefill(0, &p, 1));
    assert_eq!(run(&mut s)[0].1, Event::Prefilled { id: c, cached_tokens: 0 });
}

#[test]
fn long_prompts_are_chunked() {
    let mut s = engine(1, QueueOrder::Fcfs);
    s.submit(Duration::ZERO, prefill(0, &prompt(20_000, 2), 1));
    let events = run(&mut s);
    let p = TimingParams::default();
    let want = timing::prefill_batch_ms(&p, [8192]) * 2.0 + timing::prefill_batch_ms(&p, [20_000 - 16_384]);
    assert!((ms(events[0].0) - want).abs() < 1e-6);
}

#[test]
fn shortest_prefill_first_overtakes_a_long_prompt() {
    for (order, short_first) in [(QueueOrder::Fcfs, false), (QueueOrder::ShortestPrefillFirst, true)] {
        let mut s = engine(1, order);
        // Occupy the rank so both wait in the queue.
        s.submit(Duration::ZERO, prefill(0, &prompt(8192, 3), 1));
        let long = s.submit(Duration::ZERO, prefill(0, &prompt(8192, 4), 1));
        let short = s.submit(Duration::ZERO, prefill(0, &prompt(100, 5), 1));
        let events = run(&mut s);
        let long = time_of(&events, &Event::Finished { id: long });
        let short = time_of(&events, &Event::Finished { id: short });
        assert_eq!(short < long, short_first, "{order:?}");
    }
}

#[test]
fn under_shortest_prefill_first_a_chunked_prompt_leaves_room_for_a_shorter_one() {
    for (order, beside) in [(QueueOrder::Fcfs, false), (QueueOrder::ShortestPrefillFirst, true)] {
        let mut s = engine(1, order);
        let long = s.submit(Duration::ZERO, prefill(0, &prompt(30_000, 8), 1));
        // The short prompt arrives while the long one's first 8k chunk runs.
        let first_chunk_ends = s.next_deadline().expect("the long prompt's first chunk");
        s.advance(first_chunk_ends / 2);
        let short = s.submit(first_chunk_ends / 2, prefill(0, &prompt(100, 9), 1));
        let events = run(&mut s);
        let prefilled = |id| time_of(&events, &Event::Prefilled { id, cached_tokens: 0 });
        assert_eq!(prefilled(short) < prefilled(long), beside, "{order:?}");
        if beside {
            // The long prompt's second chunk gives up the short prompt's 100 tokens to it.
            let second = timing::prefill_batch_ms(&TimingParams::default(), [8192 - 100, 100]);
            assert!((ms(prefilled(short)) - ms(first_chunk_ends) - second).abs() < 1e-6);
        }
    }
}

#[test]
fn beside_an_unfinished_chunk_a_prompt_that_does_not_fit_whole_waits_its_turn() {
    // 64-token pages: the short prompt is reserved 128 tokens, the long one's chunk is 8,064,
    // and the 28 tokens left cannot start the 25,000-token prompt, which would make a second
    // unfinished chunked request (SGLang tracks one).
    let mut s = Scheduler::new(TimingParams::default(), 1, 8192, 64, QueueOrder::ShortestPrefillFirst);
    let long = s.submit(Duration::ZERO, prefill(0, &prompt(30_000, 10), 1));
    let first_chunk_ends = s.next_deadline().expect("the long prompt's first chunk");
    s.advance(first_chunk_ends / 2);
    let short = s.submit(first_chunk_ends / 2, prefill(0, &prompt(100, 11), 1));
    let medium = s.submit(first_chunk_ends / 2, prefill(0, &prompt(25_000, 12), 1));
    let events = run(&mut s);
    let prefilled = |id| time_of(&events, &Event::Prefilled { id, cached_tokens: 0 });
    let second = timing::prefill_batch_ms(&TimingParams::default(), [8192 - 128, 100]);
    assert!((ms(prefilled(short)) - ms(first_chunk_ends) - second).abs() < 1e-6);
    // Both long prompts finish, one after the other.
    assert!(prefilled(long) < prefilled(medium));
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn the_chunk_limit_reserves_page_rounded_room_for_shorter_waiting_prompts() {
    use super::prefill::chunk_limit;
    // 100 and 500 tokens take 128 and 512 of 64-token pages; 30,000 is not shorter than the
    // 20,000 left, so the reservation stops there.
    assert_eq!(chunk_limit(20_000, &[100, 500, 30_000, 10], 8192, 64), Some(8192 - 640));
    // Nothing shorter waits, or nothing waits: the whole chunk.
    assert_eq!(chunk_limit(300, &[300, 400], 8192, 64), None);
    assert_eq!(chunk_limit(20_000, &[], 8192, 64), None);
    // The reservation always leaves a page; a budget under two pages is left whole.
    assert_eq!(chunk_limit(20_000, &[8_130], 8192, 64), None);
    assert_eq!(chunk_limit(20_000, &[60, 8_100], 8192, 64), Some(8192 - 64));
    assert_eq!(chunk_limit(20_000, &[1], 100, 64), None);
    // A prompt with nothing to prefill is charged a page, as SGLang counts at least one token.
    assert_eq!(chunk_limit(20_000, &[0], 8192, 64), Some(8192 - 64));
}

#[test]
fn the_stall_fault_holds_the_slot_until_removed() {
    let mut s = engine(1, QueueOrder::Fcfs);
    let mut a = prefill(0, &prompt(10, 6), 100);
    a.stall_after = Some(5);
    let id = s.submit(Duration::ZERO, a);
    let events = run(&mut s);
    let last = events.iter().rev().find_map(|(_, e)| match e {
        Event::Tokens { total, .. } => Some(*total),
        _ => None,
    });
    assert_eq!(last, Some(5));
    assert_eq!(s.next_deadline(), None, "a stalled request does not step");
    assert_eq!(s.snapshot()[0].running, 1);
    assert!(s.remove(id));
    let snap = s.snapshot()[0];
    let drained =
        RankSnapshot { cached_tokens: 10, decode_moments: snap.decode_moments, ..RankSnapshot::default() };
    assert_eq!(snap, drained);
}

#[test]
fn pd_roles_hold_for_the_transfer() {
    let mut s = engine(2, QueueOrder::Fcfs);
    let mut a = prefill(1, &prompt(50, 7), 1);
    a.work = Work::Prefill { pages: PromptPages::new(&prompt(50, 7), 1, false, None), hold: true };
    let id = s.submit(Duration::ZERO, a);
    let events = run(&mut s);
    assert!(events.iter().any(|(_, e)| *e == Event::Tokens { id, total: 1 }));
    assert!(!events.iter().any(|(_, e)| matches!(e, Event::Finished { .. })));
    assert_eq!(s.snapshot()[1].transfer, 1);
    assert!(s.remove(id));

    let mut d = prefill(0, &[], 8);
    d.prompt_tokens = 50;
    d.work = Work::AwaitKv;
    let id = s.submit(Duration::from_secs(1), d);
    assert_eq!(s.next_deadline(), None, "no work before the KV arrives");
    assert_eq!(s.snapshot()[0].transfer, 1);
    let first = s.kv_arrived(Duration::from_secs(2), id, 40);
    assert_eq!(first, [Event::Tokens { id, total: 1 }]);
    let rest = run(&mut s);
    assert_eq!(rest.last().map(|(_, e)| e), Some(&Event::Finished { id }));
}

#[test]
fn a_chunked_prefill_caches_each_chunk_for_the_requests_behind_it() {
    let mut s = engine(1, QueueOrder::Fcfs);
    let p = prompt(20_000, 2);
    // A needs three 8k chunks; B (the same prompt) arrives at once and starts in A's last batch,
    // after A's first 16,384 tokens are cached (as SGLang's cache_unfinished_req does).
    let a = s.submit(Duration::ZERO, prefill(0, &p, 1));
    let b = s.submit(Duration::ZERO, prefill(0, &p, 1));
    let events = run(&mut s);
    let cached = |id| {
        events.iter().find_map(|(_, e)| match e {
            Event::Prefilled { id: x, cached_tokens } if *x == id => Some(*cached_tokens),
            _ => None,
        })
    };
    assert_eq!(cached(a), Some(0));
    assert_eq!(cached(b), Some(16_384));
}

#[test]
fn decode_moments_sum_the_back_to_back_steps_of_each_rank() {
    let mut s = engine(2, QueueOrder::Fcfs);
    // Rank 0: 4 requests; rank 1: one request that finishes early.
    for i in 0..4 {
        s.submit(Duration::ZERO, prefill(0, &prompt(10, i), 200));
    }
    s.submit(Duration::ZERO, prefill(1, &prompt(10, 9), 20));
    let events = run(&mut s);
    let step_times: Vec<Duration> = {
        let mut t: Vec<Duration> = events
            .iter()
            .filter(|(_, e)| matches!(e, Event::Tokens { total, .. } if *total > 1))
            .map(|(at, _)| *at)
            .collect();
        t.dedup();
        t
    };
    let snap = s.snapshot();
    let m0 = snap[0].decode_moments.expect("rank 0 decoded back to back");
    let [steps, batch, step_us, batch2, batch_step_us, generated] = m0;
    // Each counted step of rank 0 ran its 4 requests, or 3 once one had finished; the sums of
    // b and b² agree on how many steps had which.
    assert!(steps >= 50.0, "{m0:?}");
    let threes = 4.0 * steps - batch;
    assert!((0.0..=steps).contains(&threes), "{m0:?}");
    assert_eq!(batch2, 16.0 * (steps - threes) + 9.0 * threes, "{m0:?}");
    assert!(batch_step_us <= 4.0 * step_us && batch_step_us >= 3.0 * step_us, "{m0:?}");
    // The mean step is the engine's own step time: 9 requests' knee is far, ~36–41 ms here.
    let mean_ms = step_us / steps / 1000.0;
    assert!((30.0..45.0).contains(&mean_ms), "mean step {mean_ms} ms");
    // Launch to launch sums to the time between the first counted launch and the last one.
    let span_us = (step_times[step_times.len() - 1] - step_times[0]).as_micros() as f64;
    assert!(step_us <= span_us + 1.0, "{step_us} vs {span_us}");
    // 4 requests × 3.61 tokens per step, capped at 200 each at the end.
    assert!(generated <= 4.0 * 200.0 && generated >= 3.0 * 4.0 * steps, "{generated}");
    let m1 = snap[1].decode_moments.expect("rank 1 decoded a few steps");
    assert!(m1[0] < steps && m1[1] == m1[0], "rank 1 ran one request per step: {m1:?}");
}
