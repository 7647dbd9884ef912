//! `[router]`: the control and proxy settings a deployment forwards.

use std::ops::RangeInclusive;

use clap::ValueEnum;
use infera_proto::types::{
    DecodeInputDemand, DecodePolicy, OverlapCredit, PrefillPolicy, RequestWeight, WeightNeedsDemand,
    same_socket,
};
use toml::Spanned;

use super::Checker;
use crate::deployment::{DeploymentFile, RouterEtcd, RouterSection, RouterTls, WeightSetting};

/// `--session-ttl-ms` of control (at most a day).
const SESSION_TTL_MS: RangeInclusive<u64> = 0..=86_400_000;
/// `--kv-index-max-blocks` of control.
const KV_INDEX_MAX_BLOCKS: RangeInclusive<u64> = 1..=1_000_000_000;
/// `--lease-ttl-ms`: control takes 100 – 300,000, the proxy 300 – 300,000; both get it.
const LEASE_TTL_MS: RangeInclusive<u64> = 300..=300_000;
/// `--decode-weight-fit-half-life-ms` of control.
const FIT_HALF_LIFE_MS: RangeInclusive<u64> = 100..=3_600_000;
/// Control's `--decode-request-weight-fallback` when the file gives none (`infera-control
/// --help`): the W that `auto` uses until a fit is trusted.
const DEFAULT_FALLBACK_W: f64 = 1_000_000.0;
/// Control's `--listen` when the file gives none.
const DEFAULT_CONTROL_LISTEN: &str = "127.0.0.1:50051";

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

/// `[router.etcd]`: a certificate with its key, a user with its password file.
fn etcd_pairs(etcd: &RouterEtcd, c: &mut Checker<'_>) {
    let pairs =
        [(&etcd.cert, &etcd.key, "cert", "key"), (&etcd.user, &etcd.password_file, "user", "password_file")];
    for (a, b, a_name, b_name) in pairs {
        match (a, b) {
            (Some(given), None) => {
                c.at(given, format!("router.etcd.{a_name}"), format!("needs router.etcd.{b_name}"))
            }
            (None, Some(given)) => {
                c.at(given, format!("router.etcd.{b_name}"), format!("needs router.etcd.{a_name}"))
            }
            _ => {}
        }
    }
}

/// `admin_listen` is an address, and not `listen`'s socket: control would refuse to start.
fn admin_listen(router: &RouterSection, c: &mut Checker<'_>) {
    let Some(admin) = &router.admin_listen else { return };
    let Ok(a) = admin.get_ref().parse::<std::net::SocketAddr>() else {
        c.at(admin, "router.admin_listen", format!("{:?} is not an address (IP:PORT)", admin.get_ref()));
        return;
    };
    let listen = router.listen.as_deref().unwrap_or(DEFAULT_CONTROL_LISTEN);
    if let Ok(l) = listen.parse::<std::net::SocketAddr>()
        && same_socket(a, l)
    {
        let msg = format!(
            "{a} is the address of control's listen {l}: Admin needs an address of its own (leave \
             admin_listen out to serve Admin on listen)"
        );
        c.at(admin, "router.admin_listen", msg);
    }
}

/// `decode_request_weight` is a W or `"auto"`, its fallback a W, and the W in force (auto's
/// fallback until a fit is trusted) > 0 only with a demand mode that scores.
fn weight(router: &RouterSection, demand: Option<DecodeInputDemand>, c: &mut Checker<'_>) {
    let fallback = router.decode_request_weight_fallback.as_ref();
    if let Some(f) = fallback
        && let Err(e) = RequestWeight::new(*f.get_ref())
    {
        c.at(f, "router.decode_request_weight_fallback", e.to_string());
        return;
    }
    in_range(
        router.decode_weight_fit_half_life_ms.as_ref(),
        &FIT_HALF_LIFE_MS,
        "router.decode_weight_fit_half_life_ms",
        c,
    );
    let Some(w) = &router.decode_request_weight else { return };
    let (weight, what) = match w.get_ref() {
        WeightSetting::Pinned(x) => match RequestWeight::new(*x) {
            Ok(weight) => (weight, format!("W = {weight}")),
            Err(e) => return c.at(w, "router.decode_request_weight", e.to_string()),
        },
        WeightSetting::Auto => {
            let f = fallback.map_or(DEFAULT_FALLBACK_W, |f| *f.get_ref());
            let Ok(weight) = RequestWeight::new(f) else { return };
            (
                weight,
                format!("W = auto (W = {weight} until a fit is trusted, decode_request_weight_fallback)"),
            )
        }
    };
    let Err(WeightNeedsDemand { mode, .. }) = WeightNeedsDemand::check(weight, demand.unwrap_or_default())
    else {
        return;
    };
    c.at(
        w,
        "router.decode_request_weight",
        format!(
            "{what} needs router.decode_input_demand = \"shadow\" or \"on\" (got \"{mode}\"): W only \
             takes part in the demand cost"
        ),
    );
}

/// Choices spell as the flags do; numbers are in their flags' ranges; W > 0 needs a demand
/// mode that scores; a chat template needs the tokenizer.
pub(super) fn check(file: &DeploymentFile, c: &mut Checker<'_>) {
    let Some(router) = &file.router else { return };
    if let Some(tls) = &router.tls {
        tls_pairs(tls, c);
    }
    if let Some(etcd) = &router.etcd {
        etcd_pairs(etcd, c);
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
    admin_listen(router, c);
    weight(router, demand, c);
}
