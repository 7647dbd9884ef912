//! One arm of the study: how control picks decode targets.
//!
//! - a weight `W`: `--decode-input-demand on --decode-request-weight W
//!   --decode-prefilling-age-decay off` (the cost `booked tokens + request tokens + W × held
//!   requests`; W = 0 is token-only demand; the decay, on by default, is named off so the arm
//!   stays the cost without it);
//! - `auto`: `--decode-input-demand on --decode-request-weight auto` (each decode pool's W
//!   fitted online from its engines' step times, `manual/features/decode_weight_fit.md`; the
//!   age decay at control's default);
//! - a weight with a prefilling weight, `W/pP` (e.g. `1e6/p0`): the same with
//!   `--decode-prefilling-weight P` (held requests still in prefill count P times);
//! - either with `/age` (`1e6/age`, `1e6/p0.5/age`): `--decode-prefilling-age-decay on` (a
//!   request prefilling longer than its model's median prefill phase counts median / age);
//! - a legacy policy: `--decode-input-demand off --decode-policy round-robin|power-of-two|random`,
//!   or `least-running` (the engines' `/v1/loads`, polled every 100 ms, no ledger);
//! - `auto/admission`: `auto` with fleet admission on and the prefill guard `queue` (control's
//!   default until 2026-12-08, when it became `off`); `auto/admission/no-guard` with
//!   `--admission-prefill-guard off`; `W/age/admission` (e.g. `1e6/age/admission`) the same on
//!   the recommended setting's pinned W (admission predicts from the step fit whether W is
//!   pinned or fitted); each with goodput's two classes on the run's clock ([`super::classes`]);
//! - SMG instead of control and the proxy, `smg:POLICY[:no-overload][:priority]`, or SGLang's older
//!   router, `sglang-router:POLICY` ([`super::smg`]).

use std::fmt;
use std::str::FromStr;

use super::numbers::thousands;
use super::smg::{Gateway, SmgArm};

/// A decode selection to compare.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Arm {
    /// Demand on with this request weight (tokens per held request).
    Weight(f64),
    /// Demand on with W fitted online.
    Auto,
    /// Fleet admission on (`--admission on`, the built-in service classes) with this W and
    /// this prefill guard.
    Admitted {
        /// The W the picks score with.
        weight: AdmittedWeight,
        /// `--admission-prefill-guard`.
        guard: PrefillGuard,
    },
    /// Demand on with a request weight and a prefilling weight.
    Phased {
        /// W.
        weight: f64,
        /// `--decode-prefilling-weight`.
        prefilling: f64,
        /// `--decode-prefilling-age-decay on`.
        age_decay: bool,
        /// `--prefill-overlap-credit C` (`/cC`); control's default without.
        overlap_credit: Option<f64>,
    },
    /// Demand off; the legacy policy selects.
    Legacy(Legacy),
    /// SMG routes, with its decode policy.
    Smg(SmgArm),
}

/// Control's `--decode-policy` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Legacy {
    RoundRobin,
    PowerOfTwo,
    Random,
    LeastRunning,
}

/// The W of an admitted arm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum AdmittedWeight {
    /// `--decode-request-weight auto`.
    Auto,
    /// This W, with the prefilling age decay on (the recommended setting's).
    AgeDecayed(f64),
}

/// Control's `--admission-prefill-guard` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrefillGuard {
    /// The prefill queue (control's default was this until 2026-12-08).
    Queue,
    Off,
}

impl PrefillGuard {
    fn flag(self) -> &'static str {
        match self {
            PrefillGuard::Queue => "queue",
            PrefillGuard::Off => "off",
        }
    }

    /// The arm's suffix after `auto/admission` (none for `queue`, which the study's arms have
    /// always meant).
    fn suffix(self) -> &'static str {
        match self {
            PrefillGuard::Queue => "",
            PrefillGuard::Off => "/no-guard",
        }
    }
}

impl Legacy {
    fn name(self) -> &'static str {
        match self {
            Legacy::RoundRobin => "round-robin",
            Legacy::PowerOfTwo => "power-of-two",
            Legacy::Random => "random",
            Legacy::LeastRunning => "least-running",
        }
    }
}

impl Arm {
    /// Whether control runs fleet admission in this arm.
    pub(crate) fn admits(&self) -> bool {
        matches!(self, Arm::Admitted { .. })
    }

    /// Control's flags for this arm (none for SMG: no control runs).
    pub(crate) fn control_flags(&self) -> Vec<String> {
        match self {
            Arm::Weight(w) => demand_flags(*w, false),
            Arm::Auto => {
                ["--decode-input-demand", "on", "--decode-request-weight", "auto"].map(str::to_owned).into()
            }
            Arm::Admitted { weight, guard } => {
                let mut flags = match weight {
                    AdmittedWeight::Auto => Arm::Auto.control_flags(),
                    AdmittedWeight::AgeDecayed(w) => demand_flags(*w, true),
                };
                flags.extend(
                    ["--admission", "on", "--admission-prefill-guard", guard.flag()].map(str::to_owned),
                );
                flags
            }
            Arm::Phased { weight, prefilling, age_decay, overlap_credit } => {
                let mut flags = demand_flags(*weight, *age_decay);
                flags.extend(["--decode-prefilling-weight".into(), prefilling.to_string()]);
                if let Some(c) = overlap_credit {
                    flags.extend(["--prefill-overlap-credit".into(), c.to_string()]);
                }
                flags
            }
            Arm::Legacy(p) => {
                vec!["--decode-input-demand".into(), "off".into(), "--decode-policy".into(), p.name().into()]
            }
            Arm::Smg(_) => Vec::new(),
        }
    }

    /// A peer of the ledger: SMG, or one of infera's legacy policies (what the recommended
    /// setting is measured against).
    pub(crate) fn is_peer(&self) -> bool {
        matches!(self, Arm::Legacy(_) | Arm::Smg(_))
    }

    /// How old the load view the arm decides on is, in emulated seconds, at compression
    /// `speedup`: the ledger is exact; the least-running policy reads control's engine poll;
    /// SMG reads its load monitor (its overload protection too); round-robin reads nothing.
    pub(crate) fn load_view(&self, speedup: f64) -> String {
        let engine_s = engine_poll_ms(speedup) as f64 * speedup / 1e3;
        match self {
            Arm::Weight(_)
            | Arm::Auto
            | Arm::Admitted { .. }
            | Arm::Phased { .. }
            | Arm::Legacy(Legacy::PowerOfTwo) => {
                format!("0 (ledger; KV room polled every {engine_s:.1} s)")
            }
            Arm::Legacy(Legacy::LeastRunning) => format!("{engine_s:.1} (engine poll)"),
            Arm::Legacy(Legacy::RoundRobin | Legacy::Random) => "none read".to_owned(),
            Arm::Smg(a) if a.gateway == Gateway::SglangRouter => {
                "none of the ranks' (SGLang's DP controller picks them)".to_owned()
            }
            Arm::Smg(a) if a.policy == super::smg::SmgPolicy::RoundRobin && !a.overload_protection => {
                "none read".to_owned()
            }
            Arm::Smg(_) => {
                let wall = super::smg::load_monitor_interval_s(speedup)
                    .unwrap_or(super::smg::LOAD_MONITOR_INTERVAL_S);
                format!("{:.0} (load monitor, {wall} s wall)", wall as f64 * speedup)
            }
        }
    }

    /// A file-name-safe key: `w0`, `w1000000`, `round-robin`.
    pub(crate) fn key(&self) -> String {
        match self {
            Arm::Weight(w) => format!("w{w}"),
            Arm::Auto => "auto".to_owned(),
            Arm::Admitted { weight, guard } => {
                let base = match weight {
                    AdmittedWeight::Auto => Arm::Auto.key(),
                    AdmittedWeight::AgeDecayed(w) => format!("w{w}-age"),
                };
                format!("{base}-admission{}", guard.suffix().replace('/', "-"))
            }
            Arm::Phased { weight, prefilling, age_decay, overlap_credit } => {
                let age = if *age_decay { "-age" } else { "" };
                let credit = overlap_credit.map(|c| format!("-c{c}")).unwrap_or_default();
                format!("w{weight}-p{prefilling}{age}{credit}")
            }
            Arm::Legacy(p) => p.name().to_owned(),
            Arm::Smg(a) => a.spec().replace(':', "-"),
        }
    }
}

/// Control's `--engine-poll-ms` at `speedup`: its default 100 ms in emulated time (at least
/// 1 ms of wall clock).
pub(crate) fn engine_poll_ms(speedup: f64) -> u64 {
    (ENGINE_POLL_EMULATED_MS / speedup).round().max(1.0) as u64
}

/// Control's default `--engine-poll-ms`.
const ENGINE_POLL_EMULATED_MS: f64 = 100.0;

/// Demand on with W = `weight`, the prefilling age decay named either way.
fn demand_flags(weight: f64, age_decay: bool) -> Vec<String> {
    let decay = if age_decay { "on" } else { "off" };
    [
        "--decode-input-demand",
        "on",
        "--decode-request-weight",
        &weight.to_string(),
        "--decode-prefilling-age-decay",
        decay,
    ]
    .map(str::to_owned)
    .to_vec()
}

impl fmt::Display for Arm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arm::Weight(w) => write!(f, "W = {}", thousands(*w)),
            Arm::Auto => f.write_str("W = auto"),
            Arm::Admitted { weight, guard } => {
                match weight {
                    AdmittedWeight::Auto => f.write_str("W = auto")?,
                    AdmittedWeight::AgeDecayed(w) => write!(f, "W = {}, age-decayed", thousands(*w))?,
                }
                f.write_str(", fleet admission")?;
                match guard {
                    PrefillGuard::Queue => Ok(()),
                    PrefillGuard::Off => f.write_str(", no prefill guard"),
                }
            }
            Arm::Phased { weight, prefilling, age_decay, overlap_credit } => {
                write!(f, "W = {}, prefilling ×{prefilling}", thousands(*weight))?;
                if *age_decay {
                    write!(f, ", age-decayed")?;
                }
                match overlap_credit {
                    Some(c) => write!(f, ", prefill overlap credit {c}"),
                    None => Ok(()),
                }
            }
            Arm::Legacy(p) => write!(f, "{} (legacy)", p.name()),
            Arm::Smg(a) if a.gateway == Gateway::SglangRouter => {
                write!(f, "sglang-router 0.3.2 {}, not DP-aware", a.policy.name())
            }
            Arm::Smg(a) => {
                write!(f, "SMG {}", a.policy.name())?;
                if !a.overload_protection {
                    write!(f, ", no overload protection")?;
                }
                if a.priority_scheduler {
                    write!(f, ", priority scheduler")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Arm {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let legacy = match s {
            "round-robin" => Some(Legacy::RoundRobin),
            "power-of-two" => Some(Legacy::PowerOfTwo),
            "random" => Some(Legacy::Random),
            "least-running" => Some(Legacy::LeastRunning),
            _ => None,
        };
        if let Some(p) = legacy {
            return Ok(Arm::Legacy(p));
        }
        if s == "auto" {
            return Ok(Arm::Auto);
        }
        if let Some((base, guard)) = s.split_once("/admission") {
            let guard = [PrefillGuard::Queue, PrefillGuard::Off]
                .into_iter()
                .find(|g| g.suffix() == guard)
                .ok_or_else(|| format!("{s:?}: /admission takes /no-guard"))?;
            let weight = match base.parse()? {
                Arm::Auto => AdmittedWeight::Auto,
                Arm::Phased { weight, prefilling: 1.0, age_decay: true, overlap_credit: None } => {
                    AdmittedWeight::AgeDecayed(weight)
                }
                _ => return Err(format!("{s:?}: /admission follows auto or W/age")),
            };
            return Ok(Arm::Admitted { weight, guard });
        }
        if let Some(rest) = s.strip_prefix("smg:") {
            return SmgArm::parse(rest).map(Arm::Smg);
        }
        if let Some(rest) = s.strip_prefix("sglang-router:") {
            return SmgArm::parse_sglang_router(rest).map(Arm::Smg);
        }
        if let Some((w, c)) = s.rsplit_once("/c") {
            let credit: f64 =
                c.parse().map_err(|_| format!("{s:?}: the overlap credit after /c is not a number"))?;
            if !(credit.is_finite() && (0.0..=1e6).contains(&credit)) {
                return Err(format!("{s:?}: the overlap credit must be between 0 and 1e6"));
            }
            return match w.parse()? {
                Arm::Weight(weight) => Ok(Arm::Phased {
                    weight,
                    prefilling: 1.0,
                    age_decay: false,
                    overlap_credit: Some(credit),
                }),
                Arm::Phased { weight, prefilling, age_decay, overlap_credit: None } => {
                    Ok(Arm::Phased { weight, prefilling, age_decay, overlap_credit: Some(credit) })
                }
                _ => Err(format!("{s:?}: /cC follows a weight, W/pP or W[/pP]/age")),
            };
        }
        if let Some(w) = s.strip_suffix("/age") {
            return match w.parse()? {
                Arm::Weight(weight) => {
                    Ok(Arm::Phased { weight, prefilling: 1.0, age_decay: true, overlap_credit: None })
                }
                Arm::Phased { weight, prefilling, age_decay: false, overlap_credit: None } => {
                    Ok(Arm::Phased { weight, prefilling, age_decay: true, overlap_credit: None })
                }
                _ => Err(format!("{s:?}: /age follows a weight or W/pP")),
            };
        }
        if let Some((w, p)) = s.split_once("/p") {
            let Arm::Weight(weight) = w.parse()? else {
                return Err(format!("{s:?}: /pP follows a weight"));
            };
            let prefilling: f64 =
                p.parse().map_err(|_| format!("{s:?}: the prefilling weight after /p is not a number"))?;
            if !(prefilling.is_finite() && (0.0..=4.0).contains(&prefilling)) {
                return Err(format!("{s:?}: the prefilling weight must be between 0 and 4"));
            }
            return Ok(Arm::Phased { weight, prefilling, age_decay: false, overlap_credit: None });
        }
        let w: f64 = s.replace('_', "").parse().map_err(|_| {
            format!(
                "{s:?}: an arm is a request weight (e.g. 0, 180000, 1e6), auto, W/pP, W[/pP]/age, auto/admission or W/age/admission (each [/no-guard]), round-robin, power-of-two, random, least-running, smg:POLICY[:no-overload][:priority] or sglang-router:POLICY"
            )
        })?;
        if !(w.is_finite() && (0.0..=1e12).contains(&w)) {
            return Err(format!("{s:?}: the weight must be between 0 and 1e12"));
        }
        Ok(Arm::Weight(w))
    }
}

#[cfg(test)]
mod tests;
