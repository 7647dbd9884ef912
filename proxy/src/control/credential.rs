//! The proxy's bearer token for control's Router (`--control-token-file`): the file holds the
//! token alone (a Kubernetes Secret's key mounted as a file, or a 0600 file on a host), which goes
//! out as `authorization: Bearer <token>` on every Router call. Read at start (a file that does
//! not load stops the proxy, exit 64) and again on SIGHUP (a file that does not load is logged and
//! the token in force stays). Control names the proxy's identity from it
//! (manual/operations/security.md); with mutual TLS the client certificate does the same without
//! a token.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use infera_proto::pb::router_client::RouterClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A client of control's Router that carries the proxy's credential.
pub(crate) type RouterCalls = RouterClient<InterceptedService<Channel, Bearer>>;

/// A token file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// Unreadable.
    #[error("--control-token-file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not one token.
    #[error(
        "--control-token-file {path}: the file holds one token, printable ASCII without spaces (surrounding \
         blank lines and spaces are ignored)"
    )]
    Invalid {
        /// The file.
        path: PathBuf,
    },
}

/// The token file and the `authorization` value in force.
#[derive(Debug)]
pub struct ControlToken {
    path: PathBuf,
    header: RwLock<MetadataValue<Ascii>>,
}

impl ControlToken {
    /// Reads `path`.
    ///
    /// # Errors
    /// A file that cannot be read, or that does not hold one token.
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, TokenFileError> {
        let path = path.into();
        let header = read(&path)?;
        Ok(Self { path, header: RwLock::new(header) })
    }

    /// Reads the file again; on an error the token in force stays.
    ///
    /// # Errors
    /// A file that cannot be read, or that does not hold one token.
    pub fn reload(&self) -> Result<(), TokenFileError> {
        let header = read(&self.path)?;
        *self.header.write().unwrap_or_else(|p| p.into_inner()) = header;
        Ok(())
    }

    /// The `authorization` value in force.
    fn header(&self) -> MetadataValue<Ascii> {
        self.header.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// `Bearer <token>` from the file at `path`.
fn read(path: &Path) -> Result<MetadataValue<Ascii>, TokenFileError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| TokenFileError::Read { path: path.to_owned(), source })?;
    let token = text.trim();
    let invalid = || TokenFileError::Invalid { path: path.to_owned() };
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid());
    }
    let mut header: MetadataValue<Ascii> = format!("Bearer {token}").parse().map_err(|_| invalid())?;
    // Kept out of debug output and HPACK's index (a secret).
    header.set_sensitive(true);
    Ok(header)
}

/// The interceptor that puts the token on every call (none: calls go as they are, for a control
/// that takes client certificates or is open).
#[derive(Clone, Debug, Default)]
pub(crate) struct Bearer(Option<Arc<ControlToken>>);

impl Bearer {
    /// Calls carry `token` when given.
    pub(crate) fn new(token: Option<Arc<ControlToken>>) -> Self {
        Self(token)
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            req.metadata_mut().insert("authorization", token.header());
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authorization(bearer: &mut Bearer) -> Option<String> {
        let req = bearer.call(tonic::Request::new(())).unwrap();
        req.metadata().get("authorization").map(|v| v.to_str().unwrap().to_owned())
    }

    #[test]
    fn the_token_goes_on_every_call_and_a_reload_replaces_it_unless_the_file_is_bad() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first-token-0123456789\n").unwrap();
        let token = Arc::new(ControlToken::load(&path).unwrap());
        let mut bearer = Bearer::new(Some(token.clone()));
        assert_eq!(authorization(&mut bearer).as_deref(), Some("Bearer first-token-0123456789"));
        std::fs::write(&path, "  second-token-0123456789  \n\n").unwrap();
        token.reload().unwrap();
        assert_eq!(authorization(&mut bearer).as_deref(), Some("Bearer second-token-0123456789"));
        for bad in ["", "\n", "two words", "tab\there", "ünïcode"] {
            std::fs::write(&path, bad).unwrap();
            assert!(token.reload().is_err(), "{bad:?} taken");
        }
        assert_eq!(
            authorization(&mut bearer).as_deref(),
            Some("Bearer second-token-0123456789"),
            "the last good one stays"
        );
        assert_eq!(authorization(&mut Bearer::default()), None);
        let e = ControlToken::load(dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("--control-token-file"), "{e}");
    }
}
