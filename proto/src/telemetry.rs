//! The one tracing set-up every infera binary shares: logs (`tracing`, text or JSON) and, with
//! `--otlp-endpoint`, OpenTelemetry traces over OTLP gRPC; plus W3C trace-context propagation
//! across the wire (HTTP headers and gRPC metadata), so one trace runs proxy → control →
//! workers.

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
    pub service_name: &'static str,
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
                                .with_service_name(cfg.service_name)
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
                .with_tracer(p.tracer(cfg.service_name))
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

/// Makes `parent` the parent of `span` (a no-op for an empty context or without OTLP).
pub fn set_parent(span: &Span, parent: opentelemetry::Context) {
    let _ = span.set_parent(parent);
}
