//! `[router]`: the control and proxy settings a deployment forwards.

use std::ops::RangeInclusive;

use clap::ValueEnum;
use infera_proto::types::{
    DecodeInputDemand, DecodePolicy, OverlapCredit, PrefillPolicy, RequestWeight, WeightNeedsDemand,
};
use toml::Spanned;

use super::Checker;
use crate::deployment::{DeploymentFile, RouterTls};

/// `--session-ttl-ms` of control (at most a day).
const SESSION_TTL_MS: RangeInclusive<u64> = 0..=86_400_000;
/// `--kv-index-max-blocks` of control.
const KV_INDEX_MAX_BLOCKS: RangeInclusive<u64> = 1..=1_000_000_000;
/// `--lease-ttl-ms`: control takes 100 – 300,000, the proxy 300 – 300,000; both get it.
const LEASE_TTL_MS: RangeInclusive<u64> = 300..=300_000;

/// A number outside the range its flag accepts (control or the proxy would exit 64 at start).
fn in_range<T: PartialOrd + std::fmt::Display>(
    value: Option<&Spanned<T>>,
    range: &RangeInclusive<T>,
    field: &str,
    c: &mut Checker<'_>,
) {
    if let Some(v) = value
        && !range.contains(v.get_ref())
    {
        let msg = format!("{} is outside {} – {}", v.get_ref(), range.start(), range.end());
        c.at(v, field, msg);
    }
}

/// Each certificate of `[router.tls]` comes with its key, and each key with its certificate.
fn tls_pairs(tls: &RouterTls, c: &mut Checker<'_>) {
    let pairs = [
        (&tls.cert, &tls.key, "cert", "key"),
        (&tls.client_cert, &tls.client_key, "client_cert", "client_key"),
        (&tls.proxy_cert, &tls.proxy_key, "proxy_cert", "proxy_key"),
    ];
    for (cert, key, cert_name, key_name) in pairs {
        match (cert, key) {
            (Some(given), None) => {
                c.at(given, format!("router.tls.{cert_name}"), format!("needs router.tls.{key_name}"));
            }
            (None, Some(given)) => {
                c.at(given, format!("router.tls.{key_name}"), format!("needs router.tls.{cert_name}"));
            }
            _ => {}
        }
    }
}

/// Choices spell as the flags do; numbers are in their flags' ranges; W > 0 needs a demand
/// mode that scores; a chat template needs the tokenizer.
pub(super) fn check(file: &DeploymentFile, c: &mut Checker<'_>) {
    let Some(router) = &file.router else { return };
    if let Some(tls) = &router.tls {
        tls_pairs(tls, c);
    }
    if let Some(p) = &router.prefill_policy
        && PrefillPolicy::from_str(p.get_ref(), false).is_err()
    {
        c.at(p, "router.prefill_policy", format!("{:?} is not one of cache-aware, round-robin", p.get_ref()));
    }
    if let Some(credit) = &router.prefill_overlap_credit
        && let Err(e) = OverlapCredit::new(*credit.get_ref())
    {
        c.at(credit, "router.prefill_overlap_credit", e.to_string());
    }
    in_range(router.session_ttl_ms.as_ref(), &SESSION_TTL_MS, "router.session_ttl_ms", c);
    in_range(router.kv_index_max_blocks.as_ref(), &KV_INDEX_MAX_BLOCKS, "router.kv_index_max_blocks", c);
    in_range(router.lease_ttl_ms.as_ref(), &LEASE_TTL_MS, "router.lease_ttl_ms", c);
    if let Some(t) = &router.chat_template
        && router.tokenizer.is_none()
    {
        c.at(
            t,
            "router.chat_template",
            "needs router.tokenizer (the proxy applies the template to tokenize)",
        );
    }
    let demand = router.decode_input_demand.as_ref().and_then(|d| {
        let parsed = DecodeInputDemand::from_str(d.get_ref(), false).ok();
        if parsed.is_none() {
            c.at(d, "router.decode_input_demand", format!("{:?} is not one of off, shadow, on", d.get_ref()));
        }
        parsed
    });
    if let Some(p) = &router.decode_policy
        && DecodePolicy::from_str(p.get_ref(), false).is_err()
    {
        c.at(
            p,
            "router.decode_policy",
            format!("{:?} is not one of round-robin, random, power-of-two", p.get_ref()),
        );
    }
    let Some(w) = &router.decode_request_weight else { return };
    match RequestWeight::new(*w.get_ref()) {
        Err(e) => c.at(w, "router.decode_request_weight", e.to_string()),
        Ok(weight) => {
            let Err(WeightNeedsDemand { weight, mode }) =
                WeightNeedsDemand::check(weight, demand.unwrap_or_default())
            else {
                return;
            };
            c.at(
                w,
                "router.decode_request_weight",
                format!(
                    "W = {weight} needs router.decode_input_demand = \"shadow\" or \"on\" (got \"{mode}\"): W only \
                     takes part in the demand cost"
                ),
            );
        }
    }
}
