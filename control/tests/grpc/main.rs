//! control over real gRPC on loopback: one test binary, one module per area.

mod harness;

mod admin;
mod admin_listen;
mod admission;
mod bad_input;
mod ejection;
mod engine;
mod engine_facts;
mod kv;
mod leases;
mod no_downgrade;
mod pairing;
mod phases;
mod pick_many;
mod picks;
mod reasons;
mod reflection;
mod registry;
mod replicas;
mod router_auth;
mod secure_etcd;
mod weight_fit;
mod weight_fit_sim;
