use super::*;

#[test]
fn errors_map_to_openai_json_with_the_right_status() {
    let e = ProxyError::UnknownModel(ModelName::new("x"));
    assert_eq!(e.status(), StatusCode::NOT_FOUND);
    assert_eq!(e.json()["error"]["code"], "model_not_found");
    let upstream = ProxyError::UpstreamStatus {
        leg: Leg::Decode,
        url: "http://10.1.2.3:30000".into(),
        status: StatusCode::INTERNAL_SERVER_ERROR,
        body: "boom".into(),
    };
    let shown = upstream.json()["error"]["message"].as_str().unwrap().to_owned();
    assert_eq!(shown, "decode worker answered 500 Internal Server Error: boom");
    assert!(upstream.to_string().contains("10.1.2.3"), "the log keeps the address");
    assert_eq!(ProxyError::BodyTooLarge { limit: 1 }.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let unpaired = ProxyError::NoCompatiblePair("model \"m\" has no prefill and decode that can pair".into());
    assert_eq!(unpaired.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(unpaired.json()["error"]["code"], "no_compatible_pd_pair");
    assert_eq!(unpaired.json()["error"]["type"], "server_error");
    assert!(!unpaired.retryable());
    let up = ProxyError::UpstreamStatus {
        leg: Leg::Decode,
        url: "u".into(),
        status: StatusCode::SERVICE_UNAVAILABLE,
        body: "busy".into(),
    };
    assert!(up.retryable());
    assert_eq!(up.source_side(), ErrorSource::Upstream);
    let bad = ProxyError::UpstreamStatus {
        leg: Leg::Decode,
        url: "u".into(),
        status: StatusCode::BAD_REQUEST,
        body: "no".into(),
    };
    assert!(!bad.retryable());
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST, "a worker's 4xx is the client's problem");
    assert_eq!(up.leg_failure(), Some((Leg::Decode, Some(LegFailure::ServerError))));
    assert_eq!(bad.leg_failure(), Some((Leg::Decode, None)), "a 4xx counts against no worker");
    assert_eq!(ProxyError::BodyTooLarge { limit: 1 }.leg_failure(), None);
    let sse = String::from_utf8(up.sse_event(Envelope::OpenAi).to_vec()).unwrap();
    assert!(sse.starts_with("data: {\"error\":") && sse.ends_with("data: [DONE]\n\n"), "{sse}");
}
