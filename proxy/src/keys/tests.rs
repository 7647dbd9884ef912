use super::*;

fn toml_of(name: &str, key: &str, rate: Option<f64>) -> String {
    let hex: String = sha256(key).iter().map(|b| format!("{b:02x}")).collect();
    let rate = rate.map(|r| format!("tokens_per_second = {r}\n")).unwrap_or_default();
    format!("[[keys]]\nname = \"{name}\"\nsha256 = \"{hex}\"\n{rate}")
}

#[test]
fn a_listed_key_passes_by_name_and_anything_else_is_unauthorized() {
    let t0 = Instant::now();
    let set =
        KeySet::parse(&(toml_of("team-a", "s3cret", None) + &toml_of("team-b", "other", None)), t0).unwrap();
    assert_eq!(set.check(Some(b"Bearer s3cret"), 10, t0).unwrap().as_ref(), "team-a");
    assert_eq!(set.check(Some(b"Bearer other"), 10, t0).unwrap().as_ref(), "team-b");
    for bad in
        [None, Some(&b"s3cret"[..]), Some(b"Bearer s3cre"), Some(b"Basic s3cret"), Some(b"Bearer \xff")]
    {
        assert_eq!(set.check(bad, 1, t0), Err(Refusal::Unauthorized), "{bad:?}");
    }
    let plain = KeySet::parse(&format!("{PLAIN_HEADER}\n# ops\nk1\n\n  k2  \n"), t0).unwrap();
    assert_eq!(plain.len(), 2);
    assert!(plain.check(Some(b"Bearer k2"), 1, t0).unwrap().starts_with("key-"));
}

#[test]
fn a_key_over_its_rate_waits_as_long_as_its_bucket_needs() {
    let t0 = Instant::now();
    let set = KeySet::parse(&toml_of("slow", "k", Some(100.0)), t0).unwrap();
    assert!(set.check(Some(b"Bearer k"), 60, t0).is_ok());
    match set.check(Some(b"Bearer k"), 60, t0) {
        Err(Refusal::RateLimited { name, retry_after }) => {
            assert_eq!(name.as_ref(), "slow");
            assert!((retry_after.as_secs_f64() - 0.2).abs() < 1e-6, "{retry_after:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(set.check(Some(b"Bearer k"), 60, t0 + Duration::from_millis(200)).is_ok());
    // A request bigger than a second's worth passes once the bucket is full.
    assert!(set.check(Some(b"Bearer k"), 10_000, t0 + Duration::from_secs(5)).is_ok());
    assert!(set.check(Some(b"Bearer k"), 1, t0 + Duration::from_secs(5)).is_err());
}

#[test]
fn a_key_is_taken_from_authorization_or_from_x_api_key() {
    let set = KeySet::parse(&toml_of("anthropic", "k", None), Instant::now()).unwrap();
    let headers = |pairs: &[(&'static str, &str)]| {
        let mut h = http::HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, value.parse().unwrap());
        }
        h
    };
    let name = |h: &http::HeaderMap| set.identify_request(h).map(|c| c.name);
    assert_eq!(name(&headers(&[("x-api-key", "k")])).unwrap().as_ref(), "anthropic");
    assert_eq!(name(&headers(&[("authorization", "Bearer k")])).unwrap().as_ref(), "anthropic");
    assert_eq!(
        name(&headers(&[("authorization", "Bearer x"), ("x-api-key", "k")])).unwrap().as_ref(),
        "anthropic"
    );
    assert!(name(&headers(&[("x-api-key", "x")])).is_err());
    assert!(name(&headers(&[("x-api-key", "Bearer k")])).is_err(), "x-api-key holds the bare key");
    assert!(name(&headers(&[])).is_err());
}

#[test]
fn a_broken_toml_file_lets_no_line_of_it_in() {
    let t0 = Instant::now();
    let broken = "[[keys]]\nname = \"alice\nsha256 = \"ab\"\n";
    assert!(KeySet::parse(broken, t0).is_err());
    // Declared plain, the same lines would be keys: only the header makes them so.
    let declared = KeySet::parse(&format!("{PLAIN_HEADER}\n{broken}"), t0).unwrap();
    assert!(declared.identify(Some(b"Bearer [[keys]]")).is_ok());
}

#[test]
fn others_reading_the_file_is_a_warning_by_what_they_get() {
    assert!(exposure(KeyFormat::Plain, 0o600).is_none());
    assert!(exposure(KeyFormat::Plain, 0o640).unwrap().contains("keys themselves"));
    assert!(exposure(KeyFormat::Plain, 0o604).is_some());
    assert!(exposure(KeyFormat::Hashed, 0o640).is_none());
    assert!(exposure(KeyFormat::Hashed, 0o644).unwrap().contains("hashes"));
}

#[test]
fn bad_files_say_which_entry_is_wrong() {
    let t0 = Instant::now();
    let cases = [
        ("[[keys]]\nname = \"a\"\nsha256 = \"abc\"\n", "keys[0].sha256"),
        (&*toml_of("", "k", None), "keys[0].name"),
        (&*toml_of("a", "k", Some(-1.0)), "keys[0].tokens_per_second"),
        (&*(toml_of("a", "k", None) + &toml_of("b", "k", None)), "keys[1]: the same key twice"),
        ("[[keys]]\nname = \"a\"\nsha256 = \"x\"\nextra = 1\n", "unknown field"),
        ("# nothing\n", "lists no key"),
        (&*format!("{PLAIN_HEADER}\n# nothing\n"), "lists no key"),
        ("[server]\nport = 1\n", "without [[keys]]"),
        // A TOML file with one quote missing is an error, never one key per line.
        ("[[keys]]\nname = \"alice\nsha256 = \"00\"\n", "not a valid key file"),
        ("sk-one\nsk-two\n", "not a valid key file"),
    ];
    for (text, needle) in cases {
        let e = KeySet::parse(text, t0).unwrap_err();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
}
