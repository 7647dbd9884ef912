//! Listening sockets: when two addresses would be one socket. Control refuses `--admin-listen`
//! on `--listen`'s socket, and the launcher checks a deployment file's `[router]` the same way.

use std::net::SocketAddr;

/// Whether two sockets would be the same one: the same port (not 0, which picks a free one
/// each) on the same address, or on an unspecified address that covers the other.
pub fn same_socket(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_on_a_covering_address_is_the_same_socket_and_port_0_never_is() {
        let same = |a: &str, b: &str| same_socket(a.parse().unwrap(), b.parse().unwrap());
        assert!(same("127.0.0.1:50051", "127.0.0.1:50051"));
        assert!(same("0.0.0.0:50051", "127.0.0.1:50051"));
        assert!(same("127.0.0.1:50051", "[::]:50051"));
        assert!(!same("10.0.0.1:50051", "10.0.0.2:50051"));
        assert!(!same("127.0.0.1:50051", "127.0.0.1:50052"));
        assert!(!same("127.0.0.1:0", "127.0.0.1:0"));
    }
}
