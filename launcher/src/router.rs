//! `[router]` → the `infera-control` flags and the proxies `up` starts. A setting is forwarded
//! only when the file gives it, so control's own defaults stay the defaults.

use crate::deployment::RouterSection;

/// The router part of a deployment, ready to exec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouterPlan {
    /// Control's flags from `[router]` (no registry flag: `up` adds `--etcd` or `--workers`).
    pub control_args: Vec<String>,
    /// `--listen` of each proxy; one proxy on control-chosen defaults when the file lists none.
    pub proxies: Vec<String>,
}

/// The proxy address when `[router] proxies` is empty (the proxy's own default).
pub const DEFAULT_PROXY_LISTEN: &str = "127.0.0.1:8000";

impl RouterPlan {
    /// Control flags and proxies from `[router]` (absent: control's defaults, one proxy).
    pub fn from_section(router: Option<&RouterSection>) -> Self {
        let Some(r) = router else {
            return Self { control_args: Vec::new(), proxies: vec![DEFAULT_PROXY_LISTEN.to_owned()] };
        };
        let mut a = Vec::new();
        let mut flag = |name: &str, value: Option<String>| {
            if let Some(v) = value {
                a.push(format!("--{name}"));
                a.push(v);
            }
        };
        flag("listen", r.listen.clone());
        flag("metrics-listen", r.metrics_listen.clone());
        flag("decode-input-demand", r.decode_input_demand.as_ref().map(|d| d.get_ref().clone()));
        flag("decode-request-weight", r.decode_request_weight.as_ref().map(|w| w.get_ref().to_string()));
        flag("decode-policy", r.decode_policy.as_ref().map(|p| p.get_ref().clone()));
        flag("prefill-session-slack-tokens", r.prefill_session_slack_tokens.map(|t| t.to_string()));
        flag("session-ttl-ms", r.session_ttl_ms.map(|t| t.to_string()));
        let proxies =
            if r.proxies.is_empty() { vec![DEFAULT_PROXY_LISTEN.to_owned()] } else { r.proxies.clone() };
        Self { control_args: a, proxies }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn router(toml_text: &str) -> RouterPlan {
        let text = format!(
            "engine = \"sim\"\nsglang_version = \"0.5.23\"\n[model]\npath = \"m\"\n\
             [[mixed.workers]]\nname = \"w\"\ngpus = [0]\nport = 1\n{toml_text}"
        );
        let file = crate::deployment::parse(Path::new("t.toml"), &text).unwrap();
        RouterPlan::from_section(file.router.as_ref())
    }

    #[test]
    fn only_given_settings_are_forwarded() {
        let none = router("");
        assert!(none.control_args.is_empty());
        assert_eq!(none.proxies, [DEFAULT_PROXY_LISTEN]);
        let empty = router("[router]\n");
        assert!(empty.control_args.is_empty());
        let weight = router("[router]\ndecode_input_demand = \"on\"\ndecode_request_weight = 1000000\n");
        assert_eq!(
            weight.control_args,
            ["--decode-input-demand", "on", "--decode-request-weight", "1000000"]
        );
    }

    #[test]
    fn every_key_has_its_flag() {
        let all = router(
            "[router]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n\
             decode_input_demand = \"shadow\"\ndecode_request_weight = 0.5\ndecode_policy = \"random\"\n\
             prefill_session_slack_tokens = 7\nsession_ttl_ms = 9\nproxies = [\"127.0.0.1:0\", \"127.0.0.1:1\"]\n",
        );
        assert_eq!(
            all.control_args,
            [
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
                "--decode-input-demand",
                "shadow",
                "--decode-request-weight",
                "0.5",
                "--decode-policy",
                "random",
                "--prefill-session-slack-tokens",
                "7",
                "--session-ttl-ms",
                "9",
            ]
        );
        assert_eq!(all.proxies, ["127.0.0.1:0", "127.0.0.1:1"]);
    }
}
