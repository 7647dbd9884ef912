#!/bin/sh
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

# infera-control: infera-control, every replica
role infera-control
# the worker view: a snapshot of the prefix, then a watch
$etcdctl role grant-permission --prefix=true infera-control read /infera/v1/workers/
# the persisted W, mode, credit, drains and ejections: read at start and takeover, written on Admin changes
$etcdctl role grant-permission --prefix=true infera-control readwrite /infera/v1/config/
# the leader key (campaign, watch, revoke on stop) and the proxies' book
$etcdctl role grant-permission --prefix=true infera-control readwrite /infera/v1/control/
# the registrars' drain requests (watched) and the leader's reports of what each draining worker still holds
$etcdctl role grant-permission --prefix=true infera-control readwrite /infera/v1/drains/
user infera-control
$etcdctl user grant-role infera-control infera-control

# infera-launch: infera-launch up, the workers' registrar
role infera-launch
# each worker's record under its lease; revoking the lease on stop deletes it
$etcdctl role grant-permission --prefix=true infera-launch write /infera/v1/workers/
# a stopping worker's drain request under its lease, and control's report of what it still holds
$etcdctl role grant-permission --prefix=true infera-launch readwrite /infera/v1/drains/
user infera-launch
$etcdctl user grant-role infera-launch infera-launch

# root: etcd needs it before auth goes on; operators only, never an infera part.
user root
$etcdctl user grant-role root root
$etcdctl auth enable
