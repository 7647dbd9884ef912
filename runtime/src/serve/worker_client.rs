//! The HTTP client to SGLang workers, for the proxy's legs and control's engine reads: plain
//! `http://` URLs as before, and `https://` URLs over TLS verified against the workers' CA
//! (`--worker-ca`), with a client certificate when the workers ask for one (SGLang's
//! `--ssl-certfile` / `--ssl-keyfile` / `--ssl-ca-certs`). A worker that is `https://` is never
//! reached in plain text: without a TLS configuration its requests fail.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::tls::{TlsError, certificates, private_key, read, roots};

/// How `https://` workers are reached: the CA that signed their certificates (a deployment's
/// own: workers are not verified against public roots), and the certificate to show them when
/// they ask for one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerTlsFiles {
    /// The workers' CA (PEM bundle).
    pub ca: std::path::PathBuf,
    /// A client certificate and key (mutual TLS).
    pub identity: Option<super::tls::IdentityFiles>,
}

impl WorkerTlsFiles {
    /// The files of a part's `--worker-ca`, `--worker-cert` and `--worker-key` flags: `None`
    /// without a CA (no `https://` worker can be reached), a client identity only as a pair.
    pub fn from_flags(
        ca: Option<std::path::PathBuf>,
        cert: Option<std::path::PathBuf>,
        key: Option<std::path::PathBuf>,
    ) -> Option<Self> {
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some(super::tls::IdentityFiles { cert, key }),
            _ => None,
        };
        ca.map(|ca| Self { ca, identity })
    }
}

/// The rustls configuration of `files`. HTTP/1.1 only (what SGLang's uvicorn speaks).
///
/// # Errors
/// When a file cannot be read or used.
pub fn worker_tls(files: &WorkerTlsFiles) -> Result<rustls::ClientConfig, TlsError> {
    let ca = &files.ca;
    let roots = roots(ca, &read(ca)?)?;
    let builder = rustls::ClientConfig::builder_with_provider(super::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Ca { path: ca.to_owned(), reason: e.to_string() })?
        .with_root_certificates(roots);
    let mut config = match &files.identity {
        Some(id) => {
            let chain = certificates(&id.cert, &read(&id.cert)?)?;
            let key = private_key(&id.key, &read(&id.key)?)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| TlsError::Pair {
                cert: id.cert.clone(),
                key: id.key.clone(),
                reason: e.to_string(),
            })?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Connects `http://` URIs in plain text and `https://` ones over TLS with its configuration.
#[derive(Clone)]
pub struct WorkerConnector {
    http: HttpConnector,
    tls: Option<tokio_rustls::TlsConnector>,
}

impl std::fmt::Debug for WorkerConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConnector").field("tls", &self.tls.is_some()).finish()
    }
}

impl WorkerConnector {
    /// TCP with `connect_timeout` and no Nagle delay; TLS for `https://` with `tls` (its files
    /// read now).
    ///
    /// # Errors
    /// When a TLS file cannot be read or used.
    pub fn new(connect_timeout: Option<Duration>, tls: Option<&WorkerTlsFiles>) -> Result<Self, TlsError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(connect_timeout);
        http.set_nodelay(true);
        let tls = tls.map(worker_tls).transpose()?.map(|c| tokio_rustls::TlsConnector::from(Arc::new(c)));
        Ok(Self { http, tls })
    }
}

/// A connection to a worker, plain or over TLS.
#[derive(Debug)]
pub enum WorkerStream {
    /// `http://`.
    Plain(TokioIo<TcpStream>),
    /// `https://` (boxed: a TLS session's state is far larger than a socket).
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

impl tower_service::Service<Uri> for WorkerConnector {
    type Response = WorkerStream;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<WorkerStream, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let https = uri.scheme_str() == Some("https");
        let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
        let (connecting, tls) = (self.http.call(uri), self.tls.clone());
        Box::pin(async move {
            let tcp = connecting.await?;
            if !https {
                return Ok(WorkerStream::Plain(tcp));
            }
            let tls = tls.ok_or_else(|| {
                io::Error::new(io::ErrorKind::PermissionDenied, "an https:// worker needs --worker-ca")
            })?;
            let name = ServerName::try_from(host)?;
            let stream = tls.connect(name, tcp.into_inner()).await?;
            Ok(WorkerStream::Tls(Box::new(TokioIo::new(stream))))
        })
    }
}

impl Connection for WorkerStream {
    fn connected(&self) -> Connected {
        match self {
            Self::Plain(s) => s.connected(),
            Self::Tls(s) => s.inner().get_ref().0.connected(),
        }
    }
}

impl Read for WorkerStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl Write for WorkerStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}
