//! `[router]` → the `infera-control` flags and the proxies `up` starts. A setting is forwarded
//! only when the file gives it, so control's and the proxy's own defaults stay the defaults.

use infera_registry::EtcdSecurity;

use crate::deployment::{RouterEtcd, RouterSection, RouterTls};

/// The router part of a deployment, ready to exec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouterPlan {
    /// Control's flags from `[router]` (no registry flag: `up` adds `--etcd` or `--workers`).
    pub control_args: Vec<String>,
    /// `--listen` of each proxy; one proxy on control-chosen defaults when the file lists none.
    pub proxies: Vec<String>,
    /// Every proxy's flags from `[router]` (`up` adds `--listen` and `--control`).
    pub proxy_args: Vec<String>,
    /// Control serves TLS (`[router.tls] cert`): `up` gives the proxies an `https://` URL.
    pub control_tls: bool,
    /// The proxies serve HTTPS (`[router.tls] proxy_cert`).
    pub proxy_tls: bool,
    /// Control's own etcd settings (`[router.etcd]`); `None`: the launcher's.
    pub control_etcd: Option<EtcdSecurity>,
}

/// The proxy address when `[router] proxies` is empty (the proxy's own default).
pub const DEFAULT_PROXY_LISTEN: &str = "127.0.0.1:8000";

/// Appends `--name value` when the value is given.
fn flag(args: &mut Vec<String>, name: &str, value: Option<String>) {
    if let Some(v) = value {
        args.push(format!("--{name}"));
        args.push(v);
    }
}

/// Which sides of `[router.tls]` serve TLS.
#[derive(Clone, Copy, Debug, Default)]
struct Served {
    control: bool,
    proxy: bool,
}

/// `[router.tls]` → control's `--tls-*` and the proxies' `--control-*` and `--tls-*` flags.
fn tls_flags(t: &RouterTls, c: &mut Vec<String>, p: &mut Vec<String>) -> Served {
    let value = |v: &Option<toml::Spanned<String>>| v.as_ref().map(|s| s.get_ref().clone());
    flag(c, "tls-cert", value(&t.cert));
    flag(c, "tls-key", value(&t.key));
    flag(c, "tls-client-ca", t.client_ca.clone());
    flag(p, "control-ca", t.ca.clone());
    flag(p, "control-cert", value(&t.client_cert));
    flag(p, "control-key", value(&t.client_key));
    flag(p, "control-server-name", t.server_name.clone());
    flag(p, "tls-cert", value(&t.proxy_cert));
    flag(p, "tls-key", value(&t.proxy_key));
    Served { control: t.cert.is_some(), proxy: t.proxy_cert.is_some() }
}

/// `[router.etcd]` → control's etcd settings, as given.
fn etcd_security(e: &RouterEtcd) -> EtcdSecurity {
    let value = |v: &Option<toml::Spanned<String>>| v.as_ref().map(|s| s.get_ref().clone());
    EtcdSecurity {
        ca: e.ca.clone().map(Into::into),
        cert: value(&e.cert).map(Into::into),
        key: value(&e.key).map(Into::into),
        user: value(&e.user),
        password_file: value(&e.password_file).map(Into::into),
    }
}

impl RouterPlan {
    /// Control's etcd settings: `[router.etcd]` (its CA defaulting to the launcher's), else the
    /// launcher's own.
    pub fn control_etcd(&self, launcher: &EtcdSecurity) -> EtcdSecurity {
        match &self.control_etcd {
            Some(own) => EtcdSecurity { ca: own.ca.clone().or_else(|| launcher.ca.clone()), ..own.clone() },
            None => launcher.clone(),
        }
    }

    /// Control flags and proxies from `[router]` (absent: control's defaults, one proxy).
    pub fn from_section(router: Option<&RouterSection>) -> Self {
        let Some(r) = router else {
            return Self { proxies: vec![DEFAULT_PROXY_LISTEN.to_owned()], ..Self::default() };
        };
        let mut c = Vec::new();
        flag(&mut c, "listen", r.listen.clone());
        flag(&mut c, "metrics-listen", r.metrics_listen.clone());
        flag(&mut c, "admin-listen", r.admin_listen.as_ref().map(|a| a.get_ref().clone()));
        flag(&mut c, "decode-input-demand", r.decode_input_demand.as_ref().map(|d| d.get_ref().clone()));
        flag(
            &mut c,
            "decode-request-weight",
            r.decode_request_weight.as_ref().map(|w| w.get_ref().flag_value()),
        );
        flag(
            &mut c,
            "decode-request-weight-fallback",
            r.decode_request_weight_fallback.as_ref().map(|w| w.get_ref().to_string()),
        );
        flag(
            &mut c,
            "decode-weight-fit-half-life-ms",
            r.decode_weight_fit_half_life_ms.as_ref().map(|h| h.get_ref().to_string()),
        );
        flag(&mut c, "decode-policy", r.decode_policy.as_ref().map(|p| p.get_ref().clone()));
        flag(&mut c, "prefill-policy", r.prefill_policy.as_ref().map(|p| p.get_ref().clone()));
        flag(
            &mut c,
            "prefill-overlap-credit",
            r.prefill_overlap_credit.as_ref().map(|o| o.get_ref().to_string()),
        );
        flag(&mut c, "prefill-session-slack-tokens", r.prefill_session_slack_tokens.map(|t| t.to_string()));
        flag(&mut c, "session-ttl-ms", r.session_ttl_ms.as_ref().map(|t| t.get_ref().to_string()));
        flag(&mut c, "kv-index-max-blocks", r.kv_index_max_blocks.as_ref().map(|b| b.get_ref().to_string()));
        let lease_ttl = r.lease_ttl_ms.as_ref().map(|t| t.get_ref().to_string());
        flag(&mut c, "lease-ttl-ms", lease_ttl.clone());
        // A proxy asks control for its own TTL (control's applies to proxies that ask none), so
        // the setting reaches the proxies `up` starts only through their own flag.
        let mut p = Vec::new();
        flag(&mut p, "lease-ttl-ms", lease_ttl);
        flag(&mut p, "tokenizer", r.tokenizer.clone());
        flag(&mut p, "chat-template", r.chat_template.as_ref().map(|t| t.get_ref().clone()));
        let proxies =
            if r.proxies.is_empty() { vec![DEFAULT_PROXY_LISTEN.to_owned()] } else { r.proxies.clone() };
        let tls = r.tls.as_ref().map(|t| tls_flags(t, &mut c, &mut p)).unwrap_or_default();
        Self {
            control_args: c,
            proxies,
            proxy_args: p,
            control_tls: tls.control,
            proxy_tls: tls.proxy,
            control_etcd: r.etcd.as_ref().map(etcd_security),
        }
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
        assert!(none.control_args.is_empty() && none.proxy_args.is_empty());
        assert_eq!(none.proxies, [DEFAULT_PROXY_LISTEN]);
        let empty = router("[router]\n");
        assert!(empty.control_args.is_empty() && empty.proxy_args.is_empty());
        assert_eq!(empty.proxies, [DEFAULT_PROXY_LISTEN]);
        let weight = router("[router]\ndecode_input_demand = \"on\"\ndecode_request_weight = 1000000\n");
        assert_eq!(
            weight.control_args,
            ["--decode-input-demand", "on", "--decode-request-weight", "1000000"]
        );
        assert!(weight.proxy_args.is_empty(), "control settings stay with control");
        let credit = router("[router]\nprefill_overlap_credit = 2.5\n");
        assert_eq!(credit.control_args, ["--prefill-overlap-credit", "2.5"]);
        assert!(credit.proxy_args.is_empty());
        let tokenizer = router("[router]\ntokenizer = \"/m/tokenizer.json\"\n");
        assert!(tokenizer.control_args.is_empty(), "proxy settings stay with the proxies");
        assert_eq!(tokenizer.proxy_args, ["--tokenizer", "/m/tokenizer.json"]);
    }

    #[test]
    fn auto_w_its_fit_and_the_admin_address_reach_control() {
        let auto = router(
            "[router]\nadmin_listen = \"10.0.0.1:50052\"\ndecode_input_demand = \"on\"\n\
             decode_request_weight = \"auto\"\ndecode_request_weight_fallback = 2e5\n\
             decode_weight_fit_half_life_ms = 30000\n",
        );
        assert_eq!(
            auto.control_args,
            [
                "--admin-listen",
                "10.0.0.1:50052",
                "--decode-input-demand",
                "on",
                "--decode-request-weight",
                "auto",
                "--decode-request-weight-fallback",
                "200000",
                "--decode-weight-fit-half-life-ms",
                "30000"
            ]
        );
        assert!(auto.proxy_args.is_empty(), "control settings stay with control");
    }

    #[test]
    fn tls_files_go_to_the_side_that_reads_them() {
        let tls = router(
            "[router.tls]\ncert = \"c.pem\"\nkey = \"c.key\"\nclient_ca = \"ca.pem\"\nca = \"ca.pem\"\n\
             client_cert = \"p.pem\"\nclient_key = \"p.key\"\nserver_name = \"control\"\n\
             proxy_cert = \"api.pem\"\nproxy_key = \"api.key\"\n",
        );
        assert_eq!(
            tls.control_args,
            ["--tls-cert", "c.pem", "--tls-key", "c.key", "--tls-client-ca", "ca.pem"]
        );
        assert_eq!(
            tls.proxy_args,
            [
                "--control-ca",
                "ca.pem",
                "--control-cert",
                "p.pem",
                "--control-key",
                "p.key",
                "--control-server-name",
                "control",
                "--tls-cert",
                "api.pem",
                "--tls-key",
                "api.key"
            ]
        );
        assert!(tls.control_tls && tls.proxy_tls);
        let plain = router("[router]\n");
        assert!(!plain.control_tls && !plain.proxy_tls);
        let control_only = router("[router.tls]\ncert = \"c.pem\"\nkey = \"c.key\"\nca = \"ca.pem\"\n");
        assert!(control_only.control_tls && !control_only.proxy_tls);
    }

    #[test]
    fn every_key_has_its_flag() {
        let all = router(
            "[router]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n\
             decode_input_demand = \"shadow\"\ndecode_request_weight = 0.5\ndecode_policy = \"random\"\n\
             prefill_policy = \"round-robin\"\nprefill_overlap_credit = 4\n\
             prefill_session_slack_tokens = 7\nsession_ttl_ms = 9\nkv_index_max_blocks = 1000\n\
             lease_ttl_ms = 3000\nproxies = [\"127.0.0.1:0\", \"127.0.0.1:1\"]\n\
             tokenizer = \"/m/tokenizer.json\"\nchat_template = \"/m/chat.jinja\"\n",
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
                "--prefill-policy",
                "round-robin",
                "--prefill-overlap-credit",
                "4",
                "--prefill-session-slack-tokens",
                "7",
                "--session-ttl-ms",
                "9",
                "--kv-index-max-blocks",
                "1000",
                "--lease-ttl-ms",
                "3000",
            ]
        );
        assert_eq!(all.proxies, ["127.0.0.1:0", "127.0.0.1:1"]);
        assert_eq!(
            all.proxy_args,
            [
                "--lease-ttl-ms",
                "3000",
                "--tokenizer",
                "/m/tokenizer.json",
                "--chat-template",
                "/m/chat.jinja"
            ]
        );
    }

    #[test]
    fn control_gets_router_etcd_or_the_launchers_etcd_flags() {
        let launcher = EtcdSecurity {
            ca: Some("ca.pem".into()),
            cert: Some("launch.pem".into()),
            key: Some("launch.key".into()),
            ..EtcdSecurity::default()
        };
        let inherited = router("[router]\n");
        assert_eq!(inherited.control_etcd(&launcher), launcher, "one identity for both");
        let own = router(
            "[router.etcd]\ncert = \"control.pem\"\nkey = \"control.key\"\nuser = \"infera-control\"\n\
             password_file = \"pw\"\n",
        );
        assert!(own.control_args.is_empty(), "not a plain control flag: up adds them with --etcd");
        let got = own.control_etcd(&launcher);
        assert_eq!(
            got.flags(),
            [
                "--etcd-ca",
                "ca.pem",
                "--etcd-cert",
                "control.pem",
                "--etcd-key",
                "control.key",
                "--etcd-user",
                "infera-control",
                "--etcd-password-file",
                "pw"
            ],
            "its own identity, the launcher's CA"
        );
        let own_ca = router("[router.etcd]\nca = \"other-ca.pem\"\n");
        assert_eq!(own_ca.control_etcd(&launcher).ca, Some("other-ca.pem".into()));
        assert_eq!(own_ca.control_etcd(&launcher).cert, None, "no identity of the launcher's");
    }
}
