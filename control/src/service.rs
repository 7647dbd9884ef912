//! The gRPC server: Router (proxies, each call authenticated by [`crate::auth::RouterAuth`]),
//! Admin (operators, behind [`AdminAuth`]), health, and reflection v1 + v1alpha (grpcurl 1.8
//! speaks only v1alpha).

mod admin;
mod auth;
mod forward;
mod router;
mod wire;

use std::sync::Arc;

use infera_proto::pb::{admin_server::AdminServer, router_server::RouterServer};
use tonic::server::NamedService;
use tonic::service::interceptor::InterceptedService;

use crate::error::ControlError;
use crate::state::ControlState;

pub use auth::AdminAuth;

/// What each gRPC socket serves: `grpc` (`--listen`) and, with `--admin-listen`, `admin`.
#[derive(Debug)]
pub struct Served {
    /// Router, health and reflection; Admin too when `admin` is `None`.
    pub grpc: tonic::service::Routes,
    /// Admin, health and reflection, on a socket of its own.
    pub admin: Option<tonic::service::Routes>,
}

/// The gRPC health service's name.
const HEALTH: &str = "grpc.health.v1.Health";
/// The reflection services' names (both versions).
const REFLECTION: [&str; 2] =
    ["grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"];

/// How the services are served.
#[derive(Debug)]
pub struct Serve {
    /// The Admin bearer token (`--admin-token`).
    pub admin_token: Option<String>,
    /// Who may call the Router.
    pub router_auth: crate::auth::RouterAuth,
    /// The largest `Redeclare` taken (`--max-redeclare-bytes`).
    pub redeclare_bytes: usize,
    /// The TLS a follower forwards Admin calls to an `https://` leader with (`None`: this
    /// replica serves plain text).
    pub peers: Option<Arc<crate::tls::PeerTls>>,
    /// Admin on a socket of its own (`--admin-listen`).
    pub admin_apart: bool,
    /// Counts Admin calls not forwarded because the leader's URL is plain text while this
    /// replica serves TLS.
    pub plaintext_leaders: prometheus_client::metrics::counter::Counter,
    /// The largest message either service decodes (`--grpc-max-message-bytes`).
    pub max_message_bytes: usize,
}

/// Builds the tonic routers of every service control serves: all on one socket, or with
/// `admin_apart` Admin on a socket of its own and the rest without it (an Admin call there is
/// `UNIMPLEMENTED`, as for any unknown service). Each socket's health and reflection speak of
/// what that socket serves.
/// `stop` fires at shutdown; open `WatchDecisions` streams end then, so a graceful shutdown
/// does not wait on an operator's grpcurl.
pub async fn routes(
    state: Arc<ControlState>,
    serve: Serve,
    stop: tokio::sync::watch::Receiver<()>,
) -> Result<Served, tonic_reflection::server::Error> {
    let Serve {
        admin_token,
        router_auth,
        redeclare_bytes,
        peers,
        admin_apart,
        plaintext_leaders,
        max_message_bytes,
    } = serve;
    let admin = InterceptedService::new(
        AdminServer::new(admin::AdminService::new(state.clone(), stop, peers, plaintext_leaders))
            .max_decoding_message_size(max_message_bytes),
        AdminAuth::new(admin_token),
    );
    let router = InterceptedService::new(
        RouterServer::new(router::RouterService::new(state, redeclare_bytes))
            .max_decoding_message_size(max_message_bytes),
        router_auth,
    );
    const ROUTER: &str = <RouterServer<router::RouterService> as NamedService>::NAME;
    const ADMIN: &str = <AdminServer<admin::AdminService> as NamedService>::NAME;
    if !admin_apart {
        let grpc = socket(&[ROUTER, ADMIN], false).await?.add_service(router).add_service(admin);
        return Ok(Served { grpc, admin: None });
    }
    let grpc = socket(&[ROUTER], true).await?.add_service(router);
    let admin = socket(&[ADMIN], true).await?.add_service(admin);
    Ok(Served { grpc, admin: Some(admin) })
}

/// Health (reporting `services` serving) and reflection, for one socket; reflection lists only
/// what the socket serves when `only`, else every service of the descriptors.
async fn socket(
    services: &[&str],
    only: bool,
) -> Result<tonic::service::Routes, tonic_reflection::server::Error> {
    let (health, health_svc) = tonic_health::server::health_reporter();
    for service in services {
        health.set_service_status(*service, tonic_health::ServingStatus::Serving).await;
    }
    let reflection = || {
        let mut builder = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(infera_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
        if only {
            for name in services.iter().chain([HEALTH].iter()).chain(REFLECTION.iter()) {
                builder = builder.with_service_name(*name);
            }
        }
        builder
    };
    Ok(tonic::service::Routes::new(health_svc)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?))
}

/// `ListTargets`, the same for proxies (their fallback list) and operators.
fn list_targets(
    state: &ControlState,
    m: infera_proto::pb::ListTargetsRequest,
) -> Result<infera_proto::pb::ListTargetsResponse, ControlError> {
    let role = infera_proto::convert::role_filter("role", m.role)?;
    let model = infera_proto::convert::name_filter(m.model);
    Ok(wire::targets(&state.targets(model.as_deref(), role), state.engine()))
}

/// A span for one RPC, child of the caller's `traceparent` when it sent one.
fn rpc_span<T>(name: &'static str, req: &tonic::Request<T>) -> tracing::Span {
    let span = call_span(name);
    infera_runtime::telemetry::set_parent(
        &span,
        infera_runtime::telemetry::context_from_metadata(req.metadata()),
    );
    span
}

/// A span for one pick of a `PickMany`, named as the unary call and child of the trace context
/// the pick carries.
fn item_span(name: &'static str, trace_context: &std::collections::HashMap<String, String>) -> tracing::Span {
    let span = call_span(name);
    infera_runtime::telemetry::set_parent(&span, infera_runtime::telemetry::context_from_map(trace_context));
    span
}

/// The span of one call (or one pick of a `PickMany`), with the `request_id` its pick records.
fn call_span(name: &'static str) -> tracing::Span {
    tracing::info_span!("rpc", otel.name = name, request_id = tracing::field::Empty)
}
