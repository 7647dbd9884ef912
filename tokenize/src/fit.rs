//! Whether kitoken's BPE reads a model the way `tokenizers` runs it, before any text is tried.
//! kitoken looks a whole pre-token piece up in the vocabulary first (as `tokenizers` does only
//! with `ignore_merges`) and ranks a merge by the rank of the token it makes (not of the pair);
//! it has no dropout, and fuses unknown tokens across pieces. So the fast encoder takes a model
//! only if it is a BPE without dropout or `fuse_unk`, no two merges make the same token, and,
//! without `ignore_merges`, every vocabulary token (but the added ones, which the model never
//! sees) is what `tokenizers`' merges make of its own text.

use std::collections::HashSet;

use serde_json::Value;
use tokenizers::Model as _;

/// Why kitoken would not run this model as `tokenizers` does, if it would not.
pub(crate) fn check(reference: &tokenizers::Tokenizer, json: &Value) -> Result<(), String> {
    let model = &json["model"];
    if model["type"] != "BPE" {
        return Err(format!("the model is {}, not BPE", model["type"]));
    }
    if !model["dropout"].is_null() {
        return Err("the BPE has dropout".into());
    }
    if model["fuse_unk"] == true {
        return Err("the BPE fuses unknown tokens (`fuse_unk`)".into());
    }
    let merges = model["merges"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut made = HashSet::with_capacity(merges.len());
    for merge in merges {
        let token = match merge {
            Value::String(pair) => pair.replacen(' ', "", 1),
            Value::Array(pair) => pair.iter().filter_map(Value::as_str).collect(),
            other => return Err(format!("a merge of an unknown shape: {other}")),
        };
        if !made.insert(token.clone()) {
            return Err(format!("two merges make the token {token:?}"));
        }
    }
    if model["ignore_merges"] != true {
        // Added tokens are taken out of the text before the model sees it.
        let added = reference.get_added_tokens_decoder();
        let bpe = reference.get_model();
        for (token, id) in bpe.get_vocab().into_iter().filter(|(_, id)| !added.contains_key(id)) {
            let pieces = bpe.tokenize(&token).map_err(|e| e.to_string())?;
            if !(pieces.len() == 1 && pieces[0].id == id) {
                return Err(format!("the merges do not make the vocabulary's token {token:?}"));
            }
        }
    }
    Ok(())
}
