//! The standard variables of the `tracing` and OpenTelemetry conventions, read where infera's own
//! flags (and their `INFERA_*` variables) leave a setting unset; a flag always wins.
//!
//! - `RUST_LOG`: the log filter (`tracing_subscriber`'s `EnvFilter` convention); else `info`.
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, then `OTEL_EXPORTER_OTLP_ENDPOINT`: where traces are
//!   exported; none set, no export.
//! - `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`: no export from these variables.
//! - `OTEL_SERVICE_NAME`: the exported spans' `service.name`; else the binary's name.
//!   (`OTEL_RESOURCE_ATTRIBUTES` is read by the SDK's resource detector.)
//! - `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, then `OTEL_EXPORTER_OTLP_PROTOCOL`: infera speaks OTLP
//!   over gRPC only; another protocol is reported as a warning once logging runs.

/// What the flags and the environment settle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Settled {
    /// `tracing` filter directives.
    pub(super) log_filter: String,
    /// Where traces go, if anywhere.
    pub(super) otlp_endpoint: Option<String>,
    /// The exported spans' `service.name`.
    pub(super) service_name: String,
    /// What to warn about once logging runs.
    pub(super) warnings: Vec<String>,
}

/// Settles the flags `log` and `otlp_endpoint` (unset: `None`) against the environment `env`
/// (a variable's value by name; empty values count as unset, as the OpenTelemetry spec says).
pub(super) fn settle(
    log: Option<String>,
    otlp_endpoint: Option<String>,
    binary: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Settled {
    let var = |name: &str| env(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let log_filter = log.or_else(|| var("RUST_LOG")).unwrap_or_else(|| "info".to_owned());
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
    let from_env = || {
        if disabled {
            return None;
        }
        var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
    };
    let otlp_endpoint = otlp_endpoint.or_else(from_env);
    let mut warnings = Vec::new();
    let protocol = ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"]
        .into_iter()
        .find_map(|name| var(name).map(|v| (name, v)));
    if let (Some((name, protocol)), Some(endpoint)) = (protocol, &otlp_endpoint)
        && protocol != "grpc"
    {
        warnings.push(format!(
            "{name}={protocol}: infera exports OTLP over gRPC only; sending traces to {endpoint} over gRPC"
        ));
    }
    Settled {
        log_filter,
        otlp_endpoint,
        service_name: var("OTEL_SERVICE_NAME").unwrap_or_else(|| binary.to_owned()),
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn flags_win_then_the_conventions_then_the_defaults() {
        let none = settle(None, None, "infera-proxy", env(&[]));
        assert_eq!(
            none,
            Settled {
                log_filter: "info".into(),
                otlp_endpoint: None,
                service_name: "infera-proxy".into(),
                warnings: vec![]
            }
        );
        let vars = [
            ("RUST_LOG", "debug,hyper=warn"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_SERVICE_NAME", "edge-proxy"),
        ];
        let conv = settle(None, None, "infera-proxy", env(&vars));
        assert_eq!(conv.log_filter, "debug,hyper=warn");
        assert_eq!(conv.otlp_endpoint.as_deref(), Some("http://collector:4317"));
        assert_eq!(conv.service_name, "edge-proxy");
        let flags = settle(Some("warn".into()), Some("http://mine:4317".into()), "infera-proxy", env(&vars));
        assert_eq!(
            (flags.log_filter.as_str(), flags.otlp_endpoint.as_deref()),
            ("warn", Some("http://mine:4317"))
        );
        // The traces endpoint goes before the generic one; empty counts as unset.
        let traces = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
            ("RUST_LOG", " "),
        ];
        let t = settle(None, None, "infera-control", env(&traces));
        assert_eq!((t.otlp_endpoint.as_deref(), t.log_filter.as_str()), (Some("http://traces:4317"), "info"));
    }

    #[test]
    fn the_sdk_switched_off_exports_nothing_from_the_environment_and_other_protocols_are_reported() {
        for off in [("OTEL_SDK_DISABLED", "true"), ("OTEL_TRACES_EXPORTER", "none")] {
            let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"), off];
            assert_eq!(settle(None, None, "b", env(&vars)).otlp_endpoint, None, "{off:?}");
            // An explicit flag still exports.
            assert!(settle(None, Some("http://mine:4317".into()), "b", env(&vars)).otlp_endpoint.is_some());
        }
        let http = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ];
        let s = settle(None, None, "b", env(&http));
        assert_eq!(s.warnings.len(), 1, "{s:?}");
        assert!(s.warnings[0].contains("gRPC only"), "{s:?}");
        let grpc =
            [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
        assert!(settle(None, None, "b", env(&grpc)).warnings.is_empty());
    }
}
