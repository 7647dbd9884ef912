//! The real `infera-control` binary: flags and env, exit codes, signals, and the real tools
//! operators point at it (grpcurl, an OTLP collector).

mod process;

mod cli;
mod etcd;
mod grpcurl;
mod otlp;
