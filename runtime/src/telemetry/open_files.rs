//! The process's limit on open files. A container runtime or a login shell may start a binary
//! with a soft limit of 1,024 while the hard limit is far higher; a server that holds a socket per
//! client needs the hard one. Each binary raises its soft limit to its hard limit at start, as
//! most servers do, and logs what it has ([`soft_limit`]).

use rustix::process::{Resource, getrlimit, setrlimit};

/// Raises the soft limit on open files to the hard limit; a failure leaves it as it was.
pub fn raise() {
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
        // Refused (e.g. a hard limit the kernel caps lower): the soft limit stays.
        let _ = setrlimit(Resource::Nofile, raised);
    }
}

/// The soft limit on open files now; `None` when unlimited.
pub fn soft_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_limit() {
        raise();
        let limit = getrlimit(Resource::Nofile);
        assert_eq!(limit.current, limit.maximum);
        assert_eq!(soft_limit(), limit.maximum);
    }
}
