//! The gRPC server: Router (proxies), Admin (operators), health, and reflection v1 + v1alpha
//! (grpcurl 1.8 speaks only v1alpha).

mod admin;
mod auth;
mod forward;
mod router;
mod wire;

use std::sync::Arc;

use infera_proto::pb::{admin_server::AdminServer, router_server::RouterServer};
use tonic::service::interceptor::InterceptedService;

use crate::error::ControlError;
use crate::state::ControlState;

pub use auth::AdminAuth;

/// Builds the tonic router with every service control serves.
/// `stop` fires at shutdown; open `WatchDecisions` streams end then, so a graceful shutdown
/// does not wait on an operator's grpcurl. `peers`: the TLS a follower forwards Admin calls to
/// an `https://` leader with.
pub async fn routes(
    state: Arc<ControlState>,
    admin_token: Option<String>,
    peers: Option<Arc<crate::tls::PeerTls>>,
    stop: tokio::sync::watch::Receiver<()>,
) -> Result<tonic::service::Routes, tonic_reflection::server::Error> {
    let (health, health_svc) = tonic_health::server::health_reporter();
    health.set_serving::<RouterServer<router::RouterService>>().await;
    health.set_serving::<AdminServer<admin::AdminService>>().await;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(infera_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let admin = InterceptedService::new(
        AdminServer::new(admin::AdminService::new(state.clone(), stop, peers)),
        AdminAuth::new(admin_token),
    );
    let mut routes = tonic::service::Routes::new(health_svc);
    routes = routes
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(RouterServer::new(router::RouterService::new(state)))
        .add_service(admin);
    Ok(routes)
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
    let span = tracing::info_span!("rpc", otel.name = name, request_id = tracing::field::Empty);
    infera_proto::telemetry::set_parent(
        &span,
        infera_proto::telemetry::context_from_metadata(req.metadata()),
    );
    span
}
