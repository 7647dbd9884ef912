//! What one identity may hold or send at once (`--max-leases-per-identity`,
//! `--max-redeclare-bytes`): an authenticated proxy that goes wrong, or a credential that leaked,
//! cannot grow control's lease book (each lease is written to etcd) or send a `Redeclare` larger
//! than control reads in one call. How much its failure reports weigh is
//! [`crate::ejection::witness`]'s; how many requests a rank takes, [`crate::capacity`]'s.

/// The bounds per identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Open leases per identity.
    pub leases_per_identity: usize,
    /// Bytes of one `Redeclare`, as encoded.
    pub redeclare_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self { leases_per_identity: 64, redeclare_bytes: 1 << 20 }
    }
}
