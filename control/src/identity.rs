//! Who calls the Router: the identity a credential proves ([`crate::auth`]), which owns the
//! leases it opens and every reservation booked under them (manual/operations/security.md).

use std::fmt;
use std::sync::Arc;

/// The most bytes of an identity: a certificate's name or a tokens file's `identity`.
pub const MAX_IDENTITY_BYTES: usize = 256;

/// An authenticated caller of the Router, by name: a client certificate's URI or DNS subject
/// alternative name or common name, or the `identity` a proxy token is listed under. One name
/// space for both: a proxy keeps its identity when it moves from a token to a certificate.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity(Arc<str>);

/// Why a name cannot be an identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Empty (or blank).
    #[error("an identity must not be empty")]
    Empty,
    /// Longer than [`MAX_IDENTITY_BYTES`].
    #[error("an identity has at most {MAX_IDENTITY_BYTES} bytes, this one {0}")]
    TooLong(usize),
    /// A control character or a space: identities are printed in logs and listings.
    #[error("an identity has no spaces or control characters: {0:?}")]
    Unprintable(String),
}

impl Identity {
    /// The one identity of every caller while the Router is open (no credential configured):
    /// all callers share it, so ownership separates nobody.
    pub fn anonymous() -> Self {
        Self(Arc::from("anonymous"))
    }

    /// `name` as an identity, checked.
    ///
    /// # Errors
    /// An empty, overlong or unprintable name.
    pub fn new(name: &str) -> Result<Self, IdentityError> {
        if name.trim().is_empty() {
            return Err(IdentityError::Empty);
        }
        if name.len() > MAX_IDENTITY_BYTES {
            return Err(IdentityError::TooLong(name.len()));
        }
        if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(IdentityError::Unprintable(name.to_owned()));
        }
        Ok(Self(Arc::from(name)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({:?})", &*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(
            Identity::new("spiffe://cluster/ns/infera/sa/proxy").unwrap().as_str(),
            "spiffe://cluster/ns/infera/sa/proxy"
        );
        assert_eq!(Identity::new(""), Err(IdentityError::Empty));
        assert_eq!(Identity::new("  "), Err(IdentityError::Empty));
        assert!(matches!(Identity::new("a b"), Err(IdentityError::Unprintable(_))));
        assert!(matches!(Identity::new("a\nb"), Err(IdentityError::Unprintable(_))));
        assert_eq!(Identity::new(&"x".repeat(257)), Err(IdentityError::TooLong(257)));
        assert!(Identity::new(&"x".repeat(256)).is_ok());
        assert_ne!(Identity::new("proxy-a").unwrap(), Identity::anonymous());
    }
}
