//! The one tracing set-up every infera binary shares: logs (`tracing`, text or JSON) and, with
//! `--otlp-endpoint`, OpenTelemetry traces over OTLP gRPC; plus W3C trace-context propagation
//! across the wire (HTTP headers and gRPC metadata), so one trace runs proxy → control →
//! workers. `RUST_LOG` and the `OTEL_*` variables fill in what the flags leave unset
//! ([`conventions`]).

mod conventions;
pub mod open_files;

use std::io::IsTerminal;
use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tonic::metadata::{KeyRef, MetadataMap};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::{EnvFilter, Layer, layer::SubscriberExt, util::SubscriberInitExt};

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The telemetry flags every binary shares (flatten into its clap `Args`).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Telemetry")]
pub struct TelemetryArgs {
    /// Log filter (tracing directives), e.g. `info,decode_demand=debug`. Unset: `RUST_LOG`, else
    /// `info`.
    #[arg(long, env = "INFERA_LOG")]
    log: Option<String>,
    /// Log format.
    #[arg(long, env = "INFERA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// OTLP gRPC endpoint for traces, e.g. http://127.0.0.1:4317. Unset:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, then `OTEL_EXPORTER_OTLP_ENDPOINT`; none = no export.
    #[arg(long, env = "INFERA_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

/// A `--log` filter that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("--log {filter:?}: {source}")]
pub struct LogFilterError {
    filter: String,
    #[source]
    source: tracing_subscriber::filter::ParseError,
}

impl TelemetryArgs {
    /// Checks the flags, filled in from the process's environment ([`conventions`]);
    /// `binary` names the exported spans unless `OTEL_SERVICE_NAME` does.
    pub fn into_config(self, binary: &str) -> Result<TelemetryConfig, LogFilterError> {
        let settled =
            conventions::settle(self.log, self.otlp_endpoint, binary, |name| std::env::var(name).ok());
        if let Err(source) = EnvFilter::try_new(&settled.log_filter) {
            return Err(LogFilterError { filter: settled.log_filter, source });
        }
        Ok(TelemetryConfig {
            log_filter: settled.log_filter,
            log_format: self.log_format,
            otlp_endpoint: settled.otlp_endpoint,
            service_name: settled.service_name,
            warnings: settled.warnings,
        })
    }
}

/// What to set up.
#[derive(Clone, Debug)]
pub struct TelemetryConfig {
    /// `tracing` filter directives, e.g. `info,decode_demand=debug`.
    pub log_filter: String,
    /// Line format.
    pub log_format: LogFormat,
    /// OTLP gRPC endpoint, e.g. `http://127.0.0.1:4317`.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of exported spans.
    pub service_name: String,
    /// Logged once logging runs (a setting read but not followed).
    pub warnings: Vec<String>,
}

/// Installed telemetry; call [`Telemetry::shutdown`] before exit to flush spans.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Installs the global subscriber. Must run inside a multi-thread tokio runtime when an
    /// OTLP endpoint is set (the exporter needs the runtime).
    pub fn init(cfg: &TelemetryConfig) -> anyhow::Result<Self> {
        let filter = EnvFilter::try_new(&cfg.log_filter)?;
        let provider = match &cfg.otlp_endpoint {
            Some(endpoint) => {
                use opentelemetry_otlp::WithExportConfig;
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint.clone())
                    .with_timeout(Duration::from_secs(3))
                    .build()?;
                Some(
                    SdkTracerProvider::builder()
                        .with_batch_exporter(exporter)
                        .with_resource(
                            opentelemetry_sdk::Resource::builder()
                                .with_service_name(cfg.service_name.clone())
                                .build(),
                        )
                        .build(),
                )
            }
            None => None,
        };
        // Logs follow --log; exported spans do not: the RPC spans (info) reach the collector
        // even when the log filter is quieter.
        let otel = provider.as_ref().map(|p| {
            tracing_opentelemetry::layer()
                .with_tracer(p.tracer(cfg.service_name.clone()))
                .with_filter(LevelFilter::INFO)
        });
        let ansi = std::io::stderr().is_terminal();
        let logs = match cfg.log_format {
            LogFormat::Text => tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(ansi)
                .with_filter(filter)
                .boxed(),
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .json()
                .with_writer(std::io::stderr)
                .with_filter(filter)
                .boxed(),
        };
        tracing_subscriber::registry().with(otel).with(logs).try_init()?;
        for warning in &cfg.warnings {
            tracing::warn!("{warning}");
        }
        Ok(Self { provider })
    }

    /// Flushes and stops the exporter. Runs the blocking flush off the async threads.
    pub async fn shutdown(self) {
        if let Some(p) = self.provider {
            let done = tokio::task::spawn_blocking(move || p.shutdown()).await;
            if let Ok(Err(e)) = done {
                eprintln!("telemetry shutdown: {e}");
            }
        }
    }
}

struct MetadataExtractor<'a>(&'a MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                KeyRef::Ascii(k) => Some(k.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (http::HeaderName::try_from(key), http::HeaderValue::try_from(value)) {
            self.0.insert(k, v);
        }
    }
}

struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            tonic::metadata::MetadataValue::try_from(value),
        ) {
            self.0.insert(k, v);
        }
    }
}

/// The trace context a gRPC call carries (empty when it carries none).
pub fn context_from_metadata(metadata: &MetadataMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&MetadataExtractor(metadata))
}

/// The trace context an HTTP request carries (empty when it carries none).
pub fn context_from_headers(headers: &http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Writes `span`'s trace context (`traceparent`, `tracestate`) into HTTP headers.
pub fn inject_headers(span: &Span, headers: &mut http::HeaderMap) {
    TraceContextPropagator::new().inject_context(&span.context(), &mut HeaderInjector(headers));
}

/// Writes `span`'s trace context into gRPC metadata.
pub fn inject_metadata(span: &Span, metadata: &mut MetadataMap) {
    TraceContextPropagator::new().inject_context(&span.context(), &mut MetadataInjector(metadata));
}

/// `span`'s trace context as a map (`traceparent`, `tracestate`), for a message that carries
/// it itself (one pick of a `PickMany`).
pub fn inject_map(span: &Span) -> std::collections::HashMap<String, String> {
    let mut map = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut map);
    map
}

/// The trace context a message carries as a map (empty when it carries none).
pub fn context_from_map(map: &std::collections::HashMap<String, String>) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(map)
}

/// Makes `parent` the parent of `span` (a no-op for an empty context or without OTLP).
pub fn set_parent(span: &Span, parent: opentelemetry::Context) {
    let _ = span.set_parent(parent);
}

/// `EX_USAGE`: the configuration cannot start.
pub const EXIT_USAGE: u8 = 64;

/// The shared `main` of the binaries: parse `A` and make `C` of it (either failing: the message
/// and exit 64; `--help`/`--version`: exit 0), then run `serve` on a multi-thread runtime
/// (an error: the message and exit 1).
pub fn main<A, C, E, F, Fut>(name: &str, serve: F) -> std::process::ExitCode
where
    A: clap::Parser,
    C: TryFrom<A, Error = E>,
    E: std::fmt::Display,
    F: FnOnce(C) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    use std::process::ExitCode;
    let args = match A::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(EXIT_USAGE) } else { ExitCode::SUCCESS };
        }
    };
    let config = match C::try_from(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Before any socket: a listener's connection cap means little under a soft limit of 1,024.
    open_files::raise();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler can be installed");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("stopping");
}
