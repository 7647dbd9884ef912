//! The baseline: a tonic unary echo service with no work behind it.

pub(crate) mod pb {
    #![allow(missing_docs, unreachable_pub, missing_debug_implementations, clippy::all)]
    tonic::include_proto!("infera.bench.v1");
}

use pb::EchoMessage;
use pb::echo_server::{Echo, EchoServer};
use tokio::net::TcpListener;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;

#[derive(Debug, Default)]
struct EchoService;

#[tonic::async_trait]
impl Echo for EchoService {
    async fn echo(
        &self,
        req: tonic::Request<EchoMessage>,
    ) -> Result<tonic::Response<EchoMessage>, tonic::Status> {
        Ok(tonic::Response::new(req.into_inner()))
    }
}

/// Serves echo on `listener` (with TCP_NODELAY, as control does) until the runtime ends.
pub(crate) fn spawn(listener: TcpListener) {
    let incoming = TcpListenerStream::new(listener).map(|conn| {
        if let Ok(stream) = &conn {
            let _ = stream.set_nodelay(true);
        }
        conn
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(EchoServer::new(EchoService))
            .serve_with_incoming(incoming),
    );
}
