use http::StatusCode;

use super::*;

#[test]
fn answers_are_classified_by_how_they_ended() {
    let done = "data: {\"choices\":[]}\n\ndata: [DONE]\n\n";
    assert_eq!(classify(StatusCode::OK, true, done), End::Ok);
    let cut = "data: {\"choices\":[]}\n\ndata: {\"error\":{\"message\":\"decode worker http://x: stream broke\",\"type\":\"server_error\",\"code\":\"upstream_error\"}}\n\ndata: [DONE]\n\n";
    assert!(
        matches!(classify(StatusCode::OK, true, cut), End::Error { kind, chunks: 1, .. } if kind == "SSE upstream_error (decode)")
    );
    let engine = "data: {\"error\":{\"object\":\"error\",\"message\":\"KV transfer for bootstrap_room 123 from 127.0.0.1:5 timed out after 10000 ms\",\"code\":500}}\n\ndata: [DONE]\n\n";
    let End::Error { kind, .. } = classify(StatusCode::OK, true, engine) else { panic!() };
    assert_eq!(kind, "SSE 500 from the engine: KV transfer timed out");
    let timeout = "{\"error\":{\"message\":\"request timed out after 5s\",\"code\":\"timeout\"}}";
    assert!(
        matches!(classify(StatusCode::GATEWAY_TIMEOUT, false, timeout), End::Error { kind, .. } if kind == "HTTP 504 timeout")
    );
    assert!(matches!(classify(StatusCode::OK, true, "data: {}\n\n"), End::Broken(_)));
    assert_eq!(classify(StatusCode::OK, false, "{\"choices\":[]}"), End::Ok);
}

#[test]
fn requests_are_drawn_from_the_seed_and_their_index() {
    let plan = Plan {
        requests: 100,
        concurrency: 4,
        tokens: (8, 64),
        stream_share: 0.5,
        cancel_share: 0.1,
        cancel_within: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        seed: 1,
    };
    let a: Vec<String> = (0..100).map(|i| format!("{:?}", plan.request(i, 2))).collect();
    let b: Vec<String> = (0..100).map(|i| format!("{:?}", plan.request(i, 2))).collect();
    assert_eq!(a, b);
    let cancelled = (0..10_000).filter(|&i| plan.request(i, 2).cancel_after.is_some()).count();
    assert!((800..1_200).contains(&cancelled), "{cancelled}");
}

#[test]
fn a_proxy_is_down_from_its_kill_until_it_is_back() {
    let r = Rotation::new(vec!["a".into(), "b".into()]);
    let before = Instant::now();
    r.killed(1);
    assert!(r.was_down(1, before, Instant::now()) && !r.was_down(0, before, Instant::now()));
    r.refused(1, 1);
    assert_eq!(r.pick(1), 0, "out of rotation after a refused connection");
    r.back(1);
    assert_eq!(r.pick(1), 1);
    r.refused(1, 1);
    assert_eq!(r.pick(1), 1, "a refusal from before it came back does not count");
    let after = Instant::now();
    assert!(!r.was_down(1, after, after));
}
