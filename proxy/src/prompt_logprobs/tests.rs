use http_body_util::{BodyExt, StreamBody};
use serde_json::json;

use super::*;

fn prefill_answer(ids: &[u32]) -> Value {
    let lists: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| if i == 0 { json!([null, id, null]) } else { json!([-1.5, id, null]) })
        .collect();
    json!({"text": "", "meta_info": {"id": "r", "input_token_logprobs": lists, "output_token_logprobs": []}})
}

fn decode_answer(text: &str) -> Value {
    json!({"text": text, "meta_info": {"id": "r", "input_token_logprobs": [], "output_token_logprobs": [[-0.1, 9, null]]}})
}

#[test]
fn asked_for_by_return_logprob_alone_or_for_some_item() {
    let body = |v: Value| v.as_object().unwrap().clone();
    assert!(wanted(&body(json!({"return_logprob": true}))));
    assert!(wanted(&body(json!({"return_logprob": [false, true]}))));
    assert!(!wanted(&body(json!({"return_logprob": false}))));
    assert!(!wanted(&body(json!({"text": "x"}))));
}

#[test]
fn a_whole_answer_gets_the_prompt_in_front_of_the_decodes_lists() {
    let prefill = from_prefill(prefill_answer(&[1, 2, 3]).to_string().as_bytes());
    let merged: Value =
        serde_json::from_slice(&merge_whole(&prefill, decode_answer("hi").to_string().as_bytes())).unwrap();
    assert_eq!(
        merged["meta_info"]["input_token_logprobs"],
        json!([[null, 1, null], [-1.5, 2, null], [-1.5, 3, null]])
    );
    assert_eq!(
        merged["meta_info"]["output_token_logprobs"],
        json!([[-0.1, 9, null]]),
        "the decode's own lists stay"
    );
    assert_eq!(merged["text"], "hi");
}

#[test]
fn a_batch_is_merged_item_by_item_and_a_stream_by_each_events_index() {
    let batch = json!([prefill_answer(&[1]), prefill_answer(&[5, 6])]);
    let prefill = from_prefill(batch.to_string().as_bytes());
    let decoded = json!([decode_answer("a"), decode_answer("b")]);
    let merged: Value =
        serde_json::from_slice(&merge_whole(&prefill, decoded.to_string().as_bytes())).unwrap();
    assert_eq!(merged[0]["meta_info"]["input_token_logprobs"].as_array().unwrap().len(), 1);
    assert_eq!(merged[1]["meta_info"]["input_token_logprobs"][1], json!([-1.5, 6, null]));
    // Streamed prefill answers: the last event of each index counts.
    let mut second = prefill_answer(&[7, 8]);
    second["index"] = json!(1);
    let sse = format!("data: {}\n\ndata: {second}\n\ndata: [DONE]\n\n", prefill_answer(&[4]));
    let prefill = from_prefill(sse.as_bytes());
    let mut out = BytesMut::new();
    let mut event = decode_answer("b");
    event["index"] = json!(1);
    merge_event(&prefill, format!("data: {event}").as_bytes(), &mut out);
    let v: Value = serde_json::from_slice(out.strip_prefix(b"data: ").unwrap().trim_ascii()).unwrap();
    assert_eq!(v["meta_info"]["input_token_logprobs"][1], json!([-1.5, 8, null]));
}

#[test]
fn an_answer_without_lists_or_json_passes_unchanged() {
    let prefill = from_prefill(prefill_answer(&[1]).to_string().as_bytes());
    let plain = json!({"text": "x", "meta_info": {"id": "r"}}).to_string();
    assert_eq!(
        merge_whole(&prefill, plain.as_bytes()),
        plain.as_bytes(),
        "no input lists asked for: none added"
    );
    assert_eq!(merge_whole(&prefill, b"not json"), &b"not json"[..]);
    assert_eq!(from_prefill(b"garbage"), PrefillLogprobs::default());
}

type Chunks = Vec<Result<Frame<Bytes>, BodyError>>;
type Chunked = StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, BodyError>>>>;

fn body_of(chunks: Vec<&str>) -> Chunked {
    let frames: Chunks = chunks.into_iter().map(|c| Ok(Frame::data(Bytes::from(c.to_owned())))).collect();
    StreamBody::new(futures_util::stream::iter(frames))
}

#[tokio::test]
async fn a_stream_split_anywhere_is_merged_event_by_event() {
    let (tx, rx) = oneshot::channel();
    tx.send(from_prefill(prefill_answer(&[1, 2]).to_string().as_bytes())).unwrap();
    let e1 = format!("data: {}\n\n", decode_answer("a"));
    let e2 = format!("data: {}\n\ndata: [DONE]\n\n", decode_answer("ab"));
    let (head, tail) = e1.split_at(10);
    let body = Merged::new(body_of(vec![head, tail, &e2]), rx, true);
    let bytes = body.collect().await.unwrap().to_bytes();
    let text = std::str::from_utf8(&bytes).unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 3, "{text}");
    for e in &events[..2] {
        let v: Value = serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(v["meta_info"]["input_token_logprobs"].as_array().unwrap().len(), 2, "{e}");
    }
    assert_eq!(events[2], "data: [DONE]");
}

#[tokio::test(start_paused = true)]
async fn a_prefill_that_never_answers_holds_the_decode_only_for_the_wait() {
    let (_tx, rx) = oneshot::channel::<PrefillLogprobs>();
    let answer = decode_answer("a").to_string();
    let body = Merged::new(body_of(vec![&answer]), rx, false);
    let start = tokio::time::Instant::now();
    let bytes = body.collect().await.unwrap().to_bytes();
    assert_eq!(start.elapsed(), PREFILL_WAIT);
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["meta_info"]["input_token_logprobs"], json!([]));
    // A failed prefill leg (its sender dropped) does not wait at all.
    let (tx, rx) = oneshot::channel::<PrefillLogprobs>();
    drop(tx);
    let start = tokio::time::Instant::now();
    Merged::new(body_of(vec![&answer]), rx, false).collect().await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
}
