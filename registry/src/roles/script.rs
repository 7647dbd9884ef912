//! [`super::ROLES`] as the POSIX shell script operators run with etcdctl (as etcd's root) to
//! create infera's roles and users and turn etcd auth on. `deploy/etcd/infera-etcd-roles.sh` is
//! this text (the deploy checks compare them and run it against a real etcd).

use std::fmt::Write;

use super::{ROLES, Role};

const HEAD: &str = r#"#!/bin/sh
# infera's etcd roles and users, least privilege (manual/operations/etcd.md), then etcd auth on.
# Generated from registry/src/roles.rs (`cargo test -p infera-deploy` checks that this file is
# what it generates and runs it against a real etcd). Safe to run again.
#
# Run it as etcd's root, with etcdctl's own variables, e.g.
#   ETCDCTL_API=3 ETCDCTL_ENDPOINTS=https://etcd-0:2379 ETCDCTL_CACERT=ca.pem \
#     ETCDCTL_CERT=root.pem ETCDCTL_KEY=root-key.pem sh infera-etcd-roles.sh
# (ETCDCTL="kubectl exec … -- etcdctl" runs another etcdctl). Each user authenticates with the
# common name of its client certificate (etcd --client-cert-auth): infera-control,
# infera-launch, root. With PASSWORD_DIR set, each user gets the password in
# $PASSWORD_DIR/<user> instead (read from stdin, never on a command line), and a run again sets
# it anew (a rotation). The first run decides: etcd keeps a user made without a password
# password-less (`etcdctl user delete` it to move it to a password).
set -eu
etcdctl=${ETCDCTL:-etcdctl}

role() {
  $etcdctl role get "$1" >/dev/null 2>&1 || $etcdctl role add "$1"
}

user() {
  if [ -n "${PASSWORD_DIR:-}" ]; then
    if $etcdctl user get "$1" >/dev/null 2>&1; then
      $etcdctl user passwd --interactive=false "$1" <"$PASSWORD_DIR/$1"
    else
      $etcdctl user add --interactive=false "$1" <"$PASSWORD_DIR/$1"
    fi
  else
    $etcdctl user get "$1" >/dev/null 2>&1 || $etcdctl user add --no-password "$1"
  fi
}
"#;

const TAIL: &str = r#"
# root: etcd needs it before auth goes on; operators only, never an infera part.
user root
$etcdctl user grant-role root root
$etcdctl auth enable
"#;

/// The script.
pub fn etcdctl() -> String {
    let mut out = HEAD.to_owned();
    for role in ROLES {
        out.push_str(&section(&role));
    }
    out.push_str(TAIL);
    out
}

fn section(role: &Role) -> String {
    let mut out = format!("\n# {}: {}\nrole {}\n", role.name, role.part, role.name);
    for g in role.grants {
        let _ = writeln!(
            out,
            "# {}\n$etcdctl role grant-permission --prefix=true {} {} {}",
            g.why,
            role.name,
            g.access.etcdctl(),
            g.prefix
        );
    }
    let _ = writeln!(out, "user {}\n$etcdctl user grant-role {} {}", role.name, role.name, role.name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_grant_is_one_etcdctl_line() {
        let script = etcdctl();
        let lines: Vec<&str> = script.lines().filter(|l| l.contains("grant-permission")).collect();
        assert_eq!(
            lines,
            [
                "$etcdctl role grant-permission --prefix=true infera-control read /infera/v1/workers/",
                "$etcdctl role grant-permission --prefix=true infera-control readwrite /infera/v1/config/",
                "$etcdctl role grant-permission --prefix=true infera-control readwrite /infera/v1/control/",
                "$etcdctl role grant-permission --prefix=true infera-control readwrite /infera/v1/drains/",
                "$etcdctl role grant-permission --prefix=true infera-launch write /infera/v1/workers/",
                "$etcdctl role grant-permission --prefix=true infera-launch readwrite /infera/v1/drains/",
            ]
        );
        assert!(script.ends_with("$etcdctl auth enable\n"));
    }
}
