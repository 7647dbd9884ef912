//! The etcd roles infera's parts need, and nothing more (least privilege), as data: the test
//! etcd grants them through the client API ([`grant`]), and [`script::etcdctl`] renders the same
//! grants as the etcdctl script operators run (`deploy/etcd/infera-etcd-roles.sh`).
//!
//! | part | role | needs |
//! |---|---|---|
//! | `infera-control` (every replica) | `infera-control` | read `/infera/v1/workers/`; read and write `/infera/v1/config/`, `/infera/v1/control/` and `/infera/v1/drains/` |
//! | `infera-launch up` (the registrar) | `infera-launch` | write `/infera/v1/workers/`; read and write `/infera/v1/drains/` |
//! | `infera-proxy` | none | it never talks to etcd |
//!
//! Leases need no role: etcd grants and renews them for any client it accepts, and checks the
//! keys a lease holds when it is revoked (write on each).

pub mod script;

use etcd_client::{Client, Permission};

use crate::{RegistryError, keys};

/// What a role may do with a prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Get and watch.
    Read,
    /// Put, delete, and revoke leases holding such keys.
    Write,
    /// Both.
    ReadWrite,
}

impl Access {
    /// etcdctl's word for it.
    pub fn etcdctl(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::ReadWrite => "readwrite",
        }
    }
}

/// One permission of a role: `access` to every key under `prefix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// What the role may do.
    pub access: Access,
    /// The key prefix.
    pub prefix: &'static str,
    /// Why the part needs it.
    pub why: &'static str,
}

/// An etcd role (and the user of the same name a part authenticates as).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    /// The role's and the user's name (the common name of the part's client certificate when it
    /// authenticates with that alone).
    pub name: &'static str,
    /// Which part runs as it.
    pub part: &'static str,
    /// Its permissions.
    pub grants: &'static [Grant],
}

/// Control: follows the workers, persists the settings, elects a leader and keeps the proxies'
/// book.
pub const CONTROL: Role = Role {
    name: "infera-control",
    part: "infera-control, every replica",
    grants: &[
        Grant {
            access: Access::Read,
            prefix: keys::WORKERS,
            why: "the worker view: a snapshot of the prefix, then a watch",
        },
        Grant {
            access: Access::ReadWrite,
            prefix: keys::CONFIG,
            why: "the persisted W, mode, credit, drains and ejections: read at start and takeover, written on Admin changes",
        },
        Grant {
            access: Access::ReadWrite,
            prefix: keys::CONTROL,
            why: "the leader key (campaign, watch, revoke on stop) and the proxies' book",
        },
        Grant {
            access: Access::ReadWrite,
            prefix: keys::DRAINS,
            why: "the registrars' drain requests (watched) and the leader's reports of what each draining worker still holds",
        },
    ],
};

/// The launcher's registrar: puts each worker's record under a lease, revokes it on stop.
pub const LAUNCH: Role = Role {
    name: "infera-launch",
    part: "infera-launch up, the workers' registrar",
    grants: &[
        Grant {
            access: Access::Write,
            prefix: keys::WORKERS,
            why: "each worker's record under its lease; revoking the lease on stop deletes it",
        },
        Grant {
            access: Access::ReadWrite,
            prefix: keys::DRAINS,
            why: "a stopping worker's drain request under its lease, and control's report of what it still holds",
        },
    ],
};

/// Every role infera uses.
pub const ROLES: [Role; 2] = [CONTROL, LAUNCH];

/// The client API's permission for `grant`.
pub fn permission(grant: &Grant) -> Permission {
    let p = match grant.access {
        Access::Read => Permission::read(grant.prefix),
        Access::Write => Permission::write(grant.prefix),
        Access::ReadWrite => Permission::read_write(grant.prefix),
    };
    p.with_prefix()
}

/// Creates `role` (if it is not there yet) with its permissions, through the client API: what
/// the etcdctl script does, for a client that is etcd's root (or talks to an etcd without auth).
pub async fn grant(client: &mut Client, role: &Role) -> Result<(), RegistryError> {
    if client.role_get(role.name).await.is_err() {
        client.role_add(role.name).await?;
    }
    for g in role.grants {
        client.role_grant_permission(role.name, permission(g)).await?;
    }
    Ok(())
}
