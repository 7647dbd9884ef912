//! Logprobs in SGLang 0.5.23's three shapes: `/generate`'s `meta_info` lists
//! (`[logprob, token_id, null]`, python/sglang/srt/managers/tokenizer_manager.py), completions'
//! `{text_offset, token_logprobs, tokens, top_logprobs}` and chat's `{content: [{token, bytes,
//! logprob, top_logprobs}]}` (python/sglang/srt/entrypoints/openai/serving_completions.py,
//! serving_chat.py). The sim samples nothing: values are made up from (seed, rid, position),
//! deterministic, negative, the chosen token first among its alternatives, as greedy sampling
//! would have it.

use serde_json::{Map, Value, json};

use crate::tokens;

/// One output position.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Position {
    /// The chosen token's id.
    pub(super) id: u32,
    /// Its text (a word, with the space before it after the first).
    pub(super) text: String,
    /// Its logprob.
    pub(super) logprob: f64,
    /// The best `top` alternatives, the chosen one first: (id, text, logprob).
    pub(super) top: Vec<(u32, String, f64)>,
}

/// Positions `from..to` of the request with `rid_hash` under `seed`, `top` alternatives each.
pub(super) fn positions(seed: u64, rid_hash: u64, from: u32, to: u32, top: u32) -> Vec<Position> {
    (from..to)
        .map(|i| {
            let (id, word) = tokens::output_token(seed, rid_hash, i);
            let text = if i == 0 { word.to_owned() } else { format!(" {word}") };
            let h = tokens::mix(seed ^ rid_hash.rotate_left(17) ^ u64::from(i));
            let logprob = -0.05 - (h % 4000) as f64 / 1000.0;
            let mut alternatives = vec![(id, text.clone(), logprob)];
            for k in 1..top {
                let hk = tokens::mix(h ^ u64::from(k));
                let (alt, alt_word) = tokens::output_token(hk, rid_hash, i);
                let step = 0.01 + (hk % 500) as f64 / 1000.0;
                alternatives.push((alt, format!(" {alt_word}"), logprob - step * f64::from(k)));
            }
            Position { id, text, logprob, top: alternatives }
        })
        .collect()
}

/// `/generate`'s `input_token_logprobs` for the prompt positions of `span`: `[logprob, id, null]`,
/// the first with a `null` logprob, as SGLang's scheduler puts it (`[None] + input_token_logprobs[:-1]`,
/// python/sglang/srt/managers/scheduler_components/logprob_result_processor.py).
pub(super) fn prompt(seed: u64, rid_hash: u64, span: &crate::flow::PromptSpan) -> Value {
    let entries = span.ids.iter().zip(span.from..).map(|(&id, i)| {
        if i == span.from {
            return json!([null, id, null]);
        }
        let h = tokens::mix(seed ^ rid_hash.rotate_left(29) ^ u64::from(i));
        json!([-0.05 - (h % 6000) as f64 / 1000.0, id, null])
    });
    Value::Array(entries.collect())
}

/// `/generate`: `(output_token_logprobs, output_top_logprobs)`.
pub(super) fn generate(p: &[Position]) -> (Value, Value) {
    let tokens = p.iter().map(|x| json!([x.logprob, x.id, null])).collect();
    let tops = p
        .iter()
        .map(|x| Value::Array(x.top.iter().map(|(id, _, lp)| json!([lp, id, null])).collect()))
        .collect();
    (Value::Array(tokens), Value::Array(tops))
}

/// Completions' logprobs object.
pub(super) fn completions(p: &[Position]) -> Value {
    let tops: Vec<Value> = p
        .iter()
        .map(|x| Value::Object(x.top.iter().map(|(_, t, lp)| (t.clone(), json!(lp))).collect::<Map<_, _>>()))
        .collect();
    json!({
        "text_offset": p.iter().map(|_| -1).collect::<Vec<_>>(),
        "token_logprobs": p.iter().map(|x| x.logprob).collect::<Vec<_>>(),
        "tokens": p.iter().map(|x| x.text.as_str()).collect::<Vec<_>>(),
        "top_logprobs": tops,
    })
}

/// Chat's logprobs object.
pub(super) fn chat(p: &[Position]) -> Value {
    let entry = |text: &str, lp: f64| json!({"token": text, "bytes": text.as_bytes(), "logprob": lp});
    let content: Vec<Value> = p
        .iter()
        .map(|x| {
            let mut e = entry(&x.text, x.logprob);
            e["top_logprobs"] = Value::Array(x.top.iter().map(|(_, t, lp)| entry(t, *lp)).collect());
            e
        })
        .collect();
    json!({ "content": content })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_logprobs_name_each_prompt_id_from_the_start_with_the_first_null() {
        let span = crate::flow::PromptSpan { from: 3, ids: vec![11, 12, 13] };
        let v = prompt(7, 9, &span);
        let entries = v.as_array().unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0], json!([null, 11, null]));
        for (e, id) in entries[1..].iter().zip([12, 13]) {
            assert!(e[0].as_f64().unwrap() < 0.0);
            assert_eq!((e[1].as_u64(), e[2].is_null()), (Some(id), true));
        }
        assert_eq!(prompt(7, 9, &crate::flow::PromptSpan::default()), json!([]), "none asked: none");
    }

    #[test]
    fn positions_are_deterministic_with_the_choice_first() {
        let p = positions(7, 9, 0, 4, 2);
        assert_eq!(p, positions(7, 9, 0, 4, 2));
        assert_eq!(p.len(), 4);
        for x in &p {
            assert!(x.logprob < 0.0);
            assert_eq!(x.top.len(), 2);
            assert_eq!(x.top[0].0, x.id);
            assert!(x.top[1].2 < x.top[0].2);
        }
        assert!(!p[0].text.starts_with(' ') && p[1].text.starts_with(' '));
        assert_eq!(positions(7, 9, 2, 4, 2), p[2..]);
    }

    #[test]
    fn each_route_has_its_shape() {
        let p = positions(1, 2, 0, 2, 2);
        let (tokens, tops) = generate(&p);
        assert_eq!(tokens[0][1], p[0].id);
        assert!(tokens[0][2].is_null());
        assert_eq!(tops[1].as_array().unwrap().len(), 2);
        let c = completions(&p);
        assert_eq!(c["text_offset"], json!([-1, -1]));
        assert_eq!(c["top_logprobs"][0].as_object().unwrap().len(), 2);
        let chat = chat(&p);
        assert_eq!(chat["content"][1]["bytes"].as_array().unwrap().len(), p[1].text.len());
    }
}
