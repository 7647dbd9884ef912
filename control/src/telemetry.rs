//! Logs (`tracing`, text or JSON) and, with `--otlp-endpoint`, OpenTelemetry traces over OTLP
//! gRPC. A W3C `traceparent` in a call's metadata becomes the parent of the call's span, so a
//! proxy's trace continues into control.

use std::io::IsTerminal;
use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
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

/// A span for one RPC, child of the caller's `traceparent` when it sent one.
pub fn rpc_span<T>(name: &'static str, req: &tonic::Request<T>) -> Span {
    let span = tracing::info_span!("rpc", otel.name = name, request_id = tracing::field::Empty);
    let parent = TraceContextPropagator::new().extract(&MetadataExtractor(req.metadata()));
    let _ = span.set_parent(parent);
    span
}
