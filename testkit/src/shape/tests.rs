use serde_json::json;

use super::*;

fn kinds(report: &Report) -> Vec<(String, DiffKind)> {
    report.differences.iter().map(|d| (d.path().to_string(), d.kind())).collect()
}

#[test]
fn equal_shapes_with_other_values_are_clean() {
    let real =
        json!({"id": "a1", "n": 3, "x": 0.5, "ok": true, "none": null, "ids": [1, 2], "m": {"k": "v"}});
    let sim =
        json!({"id": "zz", "n": 9, "x": 7.25, "ok": false, "none": null, "ids": [5, 6], "m": {"k": "w"}});
    let report = compare(&real, &sim, &Spec::new());
    assert!(report.is_clean(), "{report}");
    assert!(report.allowed.is_empty());
}

#[test]
fn every_difference_is_reported_with_its_path() {
    let real =
        json!({"meta": {"dp_rank": null, "weight_versions": [{"start": 0}], "tokens": 8}, "out": [1, 2, 3]});
    let sim = json!({"meta": {"dp_rank": 0, "tokens": 8.0, "extra": "x"}, "out": [1, "2"]});
    let report = compare(&real, &sim, &Spec::new());
    assert_eq!(
        kinds(&report),
        [
            ("$.meta.dp_rank".to_owned(), DiffKind::Type),
            ("$.meta.weight_versions".to_owned(), DiffKind::Missing),
            ("$.meta.tokens".to_owned(), DiffKind::Type),
            ("$.meta.extra".to_owned(), DiffKind::Extra),
            ("$.out".to_owned(), DiffKind::Length),
            ("$.out[1]".to_owned(), DiffKind::Type),
        ]
    );
    let text = report.to_string();
    assert!(text.contains("$.meta.dp_rank: integer instead of null"), "{text}");
    assert!(text.contains("$.out: 2 items instead of 3"), "{text}");
    // A root of another type is one difference, not a walk.
    let root = compare(&json!([]), &json!({}), &Spec::new());
    assert_eq!(kinds(&root), [("$".to_owned(), DiffKind::Type)]);
}

#[test]
fn ranges_hold_on_both_sides() {
    let spec = Spec::new().range("$.loads[*].token_usage", 0.0, 1.0).unwrap();
    let real = json!({"loads": [{"token_usage": 0.3}, {"token_usage": 1.0}]});
    let sim = json!({"loads": [{"token_usage": 1_600_000.0}, {"token_usage": 0.0}]});
    let report = compare(&real, &sim, &spec);
    assert_eq!(report.differences.len(), 1, "{report}");
    match &report.differences[0] {
        Difference::OutOfRange { path, side, value, .. } => {
            assert_eq!(path.to_string(), "$.loads[0].token_usage");
            assert_eq!((*side, *value), (Side::Candidate, 1_600_000.0));
        }
        other => panic!("{other:?}"),
    }
    let bad_reference = compare(&json!({"loads": [{"token_usage": -1}]}), &real, &spec);
    let reference_side = |d: &Difference| matches!(d, Difference::OutOfRange { side: Side::Reference, .. });
    assert!(bad_reference.differences.iter().any(reference_side), "{bad_reference}");
}

#[test]
fn the_allow_list_moves_intended_differences_aside() {
    let intended = [
        Intended::only("$.loads[*].decode_moments", DiffKind::Type, "null until the first decode batch"),
        Intended::any("$.sim.**", "the sim's own keys"),
    ];
    let spec = Spec::new().allow(&intended).unwrap();
    let real = json!({"loads": [{"decode_moments": [1.0, 2.0]}], "accelerator": null});
    let sim = json!({"loads": [{"decode_moments": null}], "accelerator": "MI355X", "sim": {"a": 1}});
    let report = compare(&real, &sim, &spec);
    assert_eq!(kinds(&report), [("$.accelerator".to_owned(), DiffKind::Type)], "{report}");
    assert_eq!(report.allowed.len(), 2);
    assert_eq!(report.allowed[0].1, "null until the first decode batch");
    // `only` covers its kind and nothing else.
    let missing = compare(&real, &json!({"loads": [{}], "accelerator": null}), &spec);
    assert_eq!(kinds(&missing), [("$.loads[0].decode_moments".to_owned(), DiffKind::Missing)]);
    assert!(AllowList::new(&[Intended::any("nope", "x")]).is_err());
}

#[test]
fn member_order_is_checked_only_when_asked() {
    let real = json!({"a": 1, "b": 2, "c": 3});
    let sim = json!({"b": 2, "a": 1, "c": 3});
    assert!(compare(&real, &sim, &Spec::new()).is_clean());
    let ordered = compare(&real, &sim, &Spec::new().with_key_order());
    assert_eq!(kinds(&ordered), [("$".to_owned(), DiffKind::KeyOrder)]);
}

#[test]
fn streams_compare_as_collapsed_event_lists() {
    let real = "data: {\"text\":\"\",\"n\":1}\n\ndata: {\"text\":\"a\",\"n\":2}\n\ndata: {\"text\":\"ab\",\"n\":3}\n\n\
                data: {\"text\":\"abc\",\"n\":4,\"done\":true}\n\ndata: [DONE]\n\n";
    let sim = "data: {\"text\":\"x\",\"n\":1}\n\ndata: {\"text\":\"xyz\",\"n\":4,\"done\":true}\n\ndata: [DONE]\n\n";
    let (r, s) = (collapse_runs(&parse_sse(real)), collapse_runs(&parse_sse(sim)));
    assert_eq!((r.len(), s.len()), (3, 3));
    assert!(compare(&json!(r), &json!(s), &Spec::new()).is_clean());
    let no_done = collapse_runs(&parse_sse("data: {\"text\":\"x\",\"n\":1}\n\n"));
    let report = compare(&json!(r), &json!(no_done), &Spec::new());
    assert_eq!(kinds(&report), [("$".to_owned(), DiffKind::Length)]);
}
