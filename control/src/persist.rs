//! Admin changes of W (a number, or `auto` with its fallback number), the demand mode, the prefill overlap credit and drains, persisted in etcd (`/infera/v1/config/…`)
//! when control runs with `--etcd`, and read at start: what operators set at run time outlives a
//! restart, and a second control starts with it. Persisted values win over the flags; a
//! persisted pair that does not validate (W > 0 with mode off) is ignored with a warning.
//!
//! Drains are one value, `drained_targets`: the drained targets as `worker/rank` lines, written
//! whole after every change (so it never holds half a change) and applied at start to targets
//! whether their workers have registered yet or not.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::ValueEnum;
use infera_proto::types::{DecodeInputDemand, DpRank, OverlapCredit, RequestWeight, Target, WorkerId};

use infera_registry::EtcdConfig;

use crate::ejection::CarriedEjection;
use crate::fit::WeightMode;
use crate::settings::Settings;

const MODE: &str = "decode_input_demand";
/// W: a number, or `auto` (then the number is under [`FALLBACK`]).
const WEIGHT: &str = "decode_request_weight";
const FALLBACK: &str = "decode_request_weight_fallback";
const AUTO: &str = "auto";
const CREDIT: &str = "prefill_overlap_credit";
const DRAINED: &str = "drained_targets";
/// The ejections a leader leaves to the next: `worker/rank until_unix_ms open_ms` lines.
const EJECTED: &str = "ejected_targets";

/// The routing settings as persisted: the settings and how W is chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct Persisted {
    /// The settings; with W fitted, `weight` is the fallback.
    pub settings: Settings,
    /// Pinned or fitted W.
    pub weight_mode: WeightMode,
}

/// What a control starts (or takes over) with.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The settings: the flags overridden by etcd.
    pub persisted: Persisted,
    /// The drained targets.
    pub drains: Vec<Target>,
    /// The ejections the last leader left.
    pub ejections: Vec<CarriedEjection>,
}

impl Loaded {
    /// The flags alone: nothing persisted, no drains, no ejections.
    pub fn flags(persisted: Persisted) -> Self {
        Self { persisted, drains: Vec::new(), ejections: Vec::new() }
    }
}

/// What control starts with: the settings (flags overridden by etcd), the persisted drains and
/// ejections.
pub async fn load(etcd: &EtcdConfig, flags: Persisted) -> Loaded {
    let none = Loaded::flags;
    match tokio::time::timeout(Duration::from_secs(3), infera_registry::config::load(etcd)).await {
        Ok(Ok(persisted)) => Loaded {
            drains: persisted.get(DRAINED).map(|v| parse_drains(v)).unwrap_or_default(),
            ejections: persisted.get(EJECTED).map(|v| parse_ejections(v)).unwrap_or_default(),
            persisted: merge(flags, &persisted),
        },
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read persisted settings from etcd; using the flags");
            none(flags)
        }
        Err(_) => {
            tracing::warn!("etcd did not answer in 3 s; using the flags for W and the mode, no drains");
            none(flags)
        }
    }
}

/// One writer task for one persisted value: it takes the newest value whenever it changes, so
/// two quick changes (two drains, W right after the mode) can never land in etcd in the wrong
/// order, whatever order their transactions would have finished in.
#[derive(Debug)]
pub struct Saver<T>(tokio::sync::watch::Sender<Option<T>>);

/// The drained set, as `drained_targets`.
pub type DrainSaver = Saver<Vec<Target>>;
/// The ejected and probing targets, as `ejected_targets`.
pub type EjectionSaver = Saver<Vec<CarriedEjection>>;
/// W, the mode and the prefill overlap credit, as `decode_request_weight` (a number or `auto`),
/// `decode_request_weight_fallback`, `decode_input_demand` and `prefill_overlap_credit`.
pub type SettingsSaver = Saver<Persisted>;

impl<T: Send + Sync + 'static> Saver<T> {
    /// Starts the writer task; `render` turns a value into the keys it is stored under.
    fn start_with(
        etcd: EtcdConfig,
        what: &'static str,
        render: fn(&T) -> Vec<(&'static str, String)>,
    ) -> Self {
        let (tx, mut rx) = tokio::sync::watch::channel(None);
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let Some(values) = rx.borrow_and_update().as_ref().map(render) else { continue };
                if let Err(e) = infera_registry::config::store(&etcd, &values).await {
                    tracing::warn!(error = %e, what, "cannot persist in etcd; the change holds until control restarts");
                }
            }
        });
        Self(tx)
    }

    /// Hands the writer the value as it is now (call it while the change is still exclusive, so
    /// the last value handed over is the last change made).
    pub fn save(&self, value: T) {
        self.0.send_replace(Some(value));
    }
}

impl DrainSaver {
    /// Starts the drains' writer.
    pub fn start(etcd: EtcdConfig) -> Self {
        Self::start_with(etcd, "drains", |drained| {
            vec![(DRAINED, drained.iter().map(|t| format!("{t}\n")).collect())]
        })
    }
}

impl EjectionSaver {
    /// Starts the ejections' writer.
    pub fn start(etcd: EtcdConfig) -> Self {
        Self::start_with(etcd, "ejections", |ejected| vec![(EJECTED, render_ejections(ejected))])
    }
}

fn render_ejections(ejected: &[CarriedEjection]) -> String {
    let ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    ejected.iter().map(|e| format!("{} {} {}\n", e.target, ms(e.until), e.open.as_millis())).collect()
}

fn parse_ejections(value: &str) -> Vec<CarriedEjection> {
    value
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let parsed = (|| {
                let (w, r) = words.next()?.rsplit_once('/')?;
                let target = Target::new(WorkerId::new(w), DpRank(r.parse().ok()?));
                let until = UNIX_EPOCH + Duration::from_millis(words.next()?.parse().ok()?);
                let open = Duration::from_millis(words.next()?.parse().ok()?);
                words.next().is_none().then_some(CarriedEjection { target, until, open })
            })();
            if parsed.is_none() {
                tracing::warn!(%line, "ignoring a persisted ejection that is not `worker/rank until_ms open_ms`");
            }
            parsed
        })
        .collect()
}

impl SettingsSaver {
    /// Starts the writer of W, the mode and the credit (one transaction per write).
    pub fn start(etcd: EtcdConfig) -> Self {
        Self::start_with(etcd, "the routing settings", render)
    }
}

/// The keys the settings are stored under.
fn render(p: &Persisted) -> Vec<(&'static str, String)> {
    let s = &p.settings;
    let weight = match p.weight_mode {
        WeightMode::Pinned => s.weight.get().to_string(),
        WeightMode::Auto => AUTO.to_owned(),
    };
    vec![
        (MODE, s.mode.as_str().to_owned()),
        (WEIGHT, weight),
        (FALLBACK, s.weight.get().to_string()),
        (CREDIT, s.overlap_credit.get().to_string()),
    ]
}

fn parse_drains(value: &str) -> Vec<Target> {
    value
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|line| {
            let parsed = line
                .rsplit_once('/')
                .and_then(|(w, r)| Some(Target::new(WorkerId::new(w), DpRank(r.parse().ok()?))));
            if parsed.is_none() {
                tracing::warn!(%line, "ignoring a persisted drain that is not worker/rank");
            }
            parsed
        })
        .collect()
}

/// `flags` overridden by the persisted values that parse and validate together.
pub fn merge(flags: Persisted, persisted: &BTreeMap<String, String>) -> Persisted {
    let mut next = flags.clone();
    let (mode, settings) = (&mut next.weight_mode, &mut next.settings);
    merge_weight(mode, settings, persisted);
    merge_settings(settings, persisted);
    if next == flags {
        return flags;
    }
    match next.settings.validate() {
        Ok(()) => {
            let s = &next.settings;
            tracing::info!(mode = %s.mode, weight = s.weight.get(), weight_mode = next.weight_mode.as_str(),
                credit = s.overlap_credit.get(), "using the settings persisted in etcd");
            next
        }
        Err(e) => {
            tracing::warn!(error = %e, "ignoring persisted settings that do not validate together");
            flags
        }
    }
}

/// W as persisted: a number pins it; `auto` fits it, with the fallback number beside it (an
/// `auto` written by a control that knew no fallback keeps the flags' number).
fn merge_weight(mode: &mut WeightMode, next: &mut Settings, persisted: &BTreeMap<String, String>) {
    let number = |key: &str, v: &str| match v.parse::<f64>().ok().and_then(|w| RequestWeight::new(w).ok()) {
        Some(w) => Some(w),
        None => {
            tracing::warn!(value = %v, key, "ignoring a persisted W that does not parse");
            None
        }
    };
    match persisted.get(WEIGHT).map(String::as_str) {
        Some(AUTO) => {
            *mode = WeightMode::Auto;
            if let Some(w) = persisted.get(FALLBACK).and_then(|v| number(FALLBACK, v)) {
                next.weight = w;
            }
        }
        Some(v) => {
            if let Some(w) = number(WEIGHT, v) {
                *mode = WeightMode::Pinned;
                next.weight = w;
            }
        }
        None => {}
    }
}

fn merge_settings(next: &mut Settings, persisted: &BTreeMap<String, String>) {
    if let Some(m) = persisted.get(MODE) {
        match DecodeInputDemand::from_str(m, true) {
            Ok(mode) => next.mode = mode,
            Err(_) => {
                tracing::warn!(value = %m, "ignoring a persisted decode_input_demand that does not parse")
            }
        }
    }
    if let Some(c) = persisted.get(CREDIT) {
        match c.parse::<OverlapCredit>() {
            Ok(credit) => next.overlap_credit = credit,
            Err(e) => tracing::warn!(value = %c, error = %e, "ignoring a persisted prefill_overlap_credit"),
        }
    }
}

#[cfg(test)]
mod tests {
    use infera_proto::types::DecodePolicy;

    use super::*;

    fn flags() -> Persisted {
        Persisted { settings: settings(), weight_mode: WeightMode::Pinned }
    }

    fn settings() -> Settings {
        Settings {
            mode: DecodeInputDemand::Off,
            weight: RequestWeight::ZERO,
            policy: DecodePolicy::RoundRobin,
            prefill_policy: infera_proto::types::PrefillPolicy::CacheAware,
            overlap_credit: crate::settings::OverlapCredit::new(1.0).unwrap(),
            session_slack_tokens: 0,
            session_ttl: Duration::from_secs(1),
            session_max: 1_000_000,
            lease_ttl: Duration::from_secs(1),
            prefilling_weight: Default::default(),
            prefilling_age_decay: Default::default(),
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn persisted_values_win_when_they_validate_together() {
        let s = merge(flags(), &map(&[(MODE, "on"), (WEIGHT, "1000000")])).settings;
        assert_eq!((s.mode, s.weight.get()), (DecodeInputDemand::On, 1e6));
        let s = merge(flags(), &map(&[(WEIGHT, "5")]));
        assert_eq!(s, flags(), "W > 0 with the flags' mode off does not validate");
        let s = merge(flags(), &map(&[(MODE, "sideways"), (WEIGHT, "-1")]));
        assert_eq!(s, flags(), "values that do not parse are ignored");
        assert_eq!(merge(flags(), &BTreeMap::new()), flags());
        let s = merge(flags(), &map(&[(CREDIT, "2.5")])).settings;
        assert_eq!(s.overlap_credit.get(), 2.5);
        for bad in ["101", "NaN", "x"] {
            assert_eq!(merge(flags(), &map(&[(CREDIT, bad)])), flags(), "credit {bad} is ignored");
        }
    }

    #[test]
    fn auto_is_persisted_like_a_number_with_its_fallback() {
        let p = merge(flags(), &map(&[(MODE, "shadow"), (WEIGHT, AUTO), (FALLBACK, "180000")]));
        assert_eq!(
            (p.weight_mode, p.settings.mode, p.settings.weight.get()),
            (WeightMode::Auto, DecodeInputDemand::Shadow, 180_000.0)
        );
        // Written by a control before the fallback existed: the flags' number stays.
        let p = merge(flags(), &map(&[(MODE, "on"), (WEIGHT, AUTO)]));
        assert_eq!((p.weight_mode, p.settings.weight.get()), (WeightMode::Auto, 0.0));
        // A number pins again, even over flags that said auto.
        let auto = Persisted { weight_mode: WeightMode::Auto, ..flags() };
        let p = merge(auto, &map(&[(MODE, "on"), (WEIGHT, "5"), (FALLBACK, "7")]));
        assert_eq!((p.weight_mode, p.settings.weight.get()), (WeightMode::Pinned, 5.0));
        // What the saver writes reads back as it was.
        let saved = Persisted {
            settings: Settings {
                mode: DecodeInputDemand::On,
                weight: RequestWeight::new(3e5).unwrap(),
                ..settings()
            },
            weight_mode: WeightMode::Auto,
        };
        let written: BTreeMap<String, String> =
            render(&saved).into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        assert_eq!(merge(flags(), &written), saved);
    }

    #[test]
    fn drains_are_worker_rank_lines() {
        let t = |w: &str, r| Target::new(WorkerId::new(w), DpRank(r));
        assert_eq!(parse_drains("d-0/3\nprefill-a/0\n\nbad\nx/y\n"), vec![t("d-0", 3), t("prefill-a", 0)]);
        assert!(parse_drains("").is_empty());
    }

    #[test]
    fn ejections_are_target_until_open_lines_and_round_trip() {
        let e = |w: &str, r, until_ms, open_ms| CarriedEjection {
            target: Target::new(WorkerId::new(w), DpRank(r)),
            until: UNIX_EPOCH + Duration::from_millis(until_ms),
            open: Duration::from_millis(open_ms),
        };
        let carried = vec![e("d-0", 3, 1_796_000_000_123, 60_000), e("p/x", 0, 5, 120_000)];
        let text = render_ejections(&carried);
        assert_eq!(text, "d-0/3 1796000000123 60000\np/x/0 5 120000\n");
        assert_eq!(parse_ejections(&text), carried);
        let bad = "d-0/3 1 2 3\nd-0/x 1 2\nd-0/1 soon 2\nd-0/1 1\n\nd-0/2 7 8\n";
        assert_eq!(parse_ejections(bad), vec![e("d-0", 2, 7, 8)], "the lines that do not parse are skipped");
    }
}
