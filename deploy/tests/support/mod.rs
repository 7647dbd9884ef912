//! What the Kubernetes checks share: the pods an overlay makes, their command lines as the
//! binaries would get them, the worker pods against the deployment file, and a reading of the
//! network policies.

pub(crate) mod flags;
pub(crate) mod pods;
pub(crate) mod policy;
pub(crate) mod secrets;
pub(crate) mod workers;
