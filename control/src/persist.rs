//! Admin changes of W, the demand mode, the prefill overlap credit and drains, persisted in etcd (`/infera/v1/config/…`)
//! when control runs with `--etcd`, and read at start: what operators set at run time outlives a
//! restart, and a second control starts with it. Persisted values win over the flags; a
//! persisted pair that does not validate (W > 0 with mode off) is ignored with a warning.
//!
//! Drains are one value, `drained_targets`: the drained targets as `worker/rank` lines, written
//! whole after every change (so it never holds half a change) and applied at start to targets
//! whether their workers have registered yet or not.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::ValueEnum;
use infera_proto::types::{DecodeInputDemand, DpRank, OverlapCredit, RequestWeight, Target, WorkerId};

use crate::settings::Settings;

const MODE: &str = "decode_input_demand";
const WEIGHT: &str = "decode_request_weight";
const CREDIT: &str = "prefill_overlap_credit";
const DRAINED: &str = "drained_targets";

/// What control starts with: the settings (flags overridden by etcd) and the persisted drains.
pub async fn load(endpoints: &[String], flags: Settings) -> (Settings, Vec<Target>) {
    match tokio::time::timeout(Duration::from_secs(3), infera_registry::config::load(endpoints)).await {
        Ok(Ok(persisted)) => {
            let drains = persisted.get(DRAINED).map(|v| parse_drains(v)).unwrap_or_default();
            (merge(flags, &persisted), drains)
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read persisted settings from etcd; using the flags");
            (flags, Vec::new())
        }
        Err(_) => {
            tracing::warn!("etcd did not answer in 3 s; using the flags for W and the mode, no drains");
            (flags, Vec::new())
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
/// W, the mode and the prefill overlap credit, as `decode_request_weight`,
/// `decode_input_demand` and `prefill_overlap_credit`.
pub type SettingsSaver = Saver<Settings>;

impl<T: Send + Sync + 'static> Saver<T> {
    /// Starts the writer task; `render` turns a value into the keys it is stored under.
    fn start_with(
        endpoints: Vec<String>,
        what: &'static str,
        render: fn(&T) -> Vec<(&'static str, String)>,
    ) -> Self {
        let (tx, mut rx) = tokio::sync::watch::channel(None);
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let Some(values) = rx.borrow_and_update().as_ref().map(render) else { continue };
                if let Err(e) = infera_registry::config::store(&endpoints, &values).await {
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
    pub fn start(endpoints: Vec<String>) -> Self {
        Self::start_with(endpoints, "drains", |drained| {
            vec![(DRAINED, drained.iter().map(|t| format!("{t}\n")).collect())]
        })
    }
}

impl SettingsSaver {
    /// Starts the writer of W, the mode and the credit (one transaction per write).
    pub fn start(endpoints: Vec<String>) -> Self {
        Self::start_with(endpoints, "the routing settings", |s| {
            vec![
                (MODE, s.mode.as_str().to_owned()),
                (WEIGHT, s.weight.get().to_string()),
                (CREDIT, s.overlap_credit.get().to_string()),
            ]
        })
    }
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
pub fn merge(flags: Settings, persisted: &BTreeMap<String, String>) -> Settings {
    let mut next = flags.clone();
    if let Some(m) = persisted.get(MODE) {
        match DecodeInputDemand::from_str(m, true) {
            Ok(mode) => next.mode = mode,
            Err(_) => {
                tracing::warn!(value = %m, "ignoring a persisted decode_input_demand that does not parse")
            }
        }
    }
    if let Some(w) = persisted.get(WEIGHT) {
        match w.parse::<f64>().ok().and_then(|w| RequestWeight::new(w).ok()) {
            Some(weight) => next.weight = weight,
            None => {
                tracing::warn!(value = %w, "ignoring a persisted decode_request_weight that does not parse")
            }
        }
    }
    if let Some(c) = persisted.get(CREDIT) {
        match c.parse::<OverlapCredit>() {
            Ok(credit) => next.overlap_credit = credit,
            Err(e) => tracing::warn!(value = %c, error = %e, "ignoring a persisted prefill_overlap_credit"),
        }
    }
    if next == flags {
        return flags;
    }
    match next.validate() {
        Ok(()) => {
            tracing::info!(mode = %next.mode, weight = next.weight.get(), credit = next.overlap_credit.get(),
                "using the settings persisted in etcd");
            next
        }
        Err(e) => {
            tracing::warn!(error = %e, "ignoring persisted settings that do not validate together");
            flags
        }
    }
}

#[cfg(test)]
mod tests {
    use infera_proto::types::DecodePolicy;

    use super::*;

    fn flags() -> Settings {
        Settings {
            mode: DecodeInputDemand::Off,
            weight: RequestWeight::ZERO,
            policy: DecodePolicy::RoundRobin,
            prefill_policy: infera_proto::types::PrefillPolicy::CacheAware,
            overlap_credit: crate::settings::OverlapCredit::new(1.0).unwrap(),
            session_slack_tokens: 0,
            session_ttl: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(1),
            prefilling_weight: Default::default(),
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn persisted_values_win_when_they_validate_together() {
        let s = merge(flags(), &map(&[(MODE, "on"), (WEIGHT, "1000000")]));
        assert_eq!((s.mode, s.weight.get()), (DecodeInputDemand::On, 1e6));
        let s = merge(flags(), &map(&[(WEIGHT, "5")]));
        assert_eq!(s, flags(), "W > 0 with the flags' mode off does not validate");
        let s = merge(flags(), &map(&[(MODE, "sideways"), (WEIGHT, "-1")]));
        assert_eq!(s, flags(), "values that do not parse are ignored");
        assert_eq!(merge(flags(), &BTreeMap::new()), flags());
        let s = merge(flags(), &map(&[(CREDIT, "2.5")]));
        assert_eq!(s.overlap_credit.get(), 2.5);
        for bad in ["101", "NaN", "x"] {
            assert_eq!(merge(flags(), &map(&[(CREDIT, bad)])), flags(), "credit {bad} is ignored");
        }
    }

    #[test]
    fn drains_are_worker_rank_lines() {
        let t = |w: &str, r| Target::new(WorkerId::new(w), DpRank(r));
        assert_eq!(parse_drains("d-0/3\nprefill-a/0\n\nbad\nx/y\n"), vec![t("d-0", 3), t("prefill-a", 0)]);
        assert!(parse_drains("").is_empty());
    }
}
