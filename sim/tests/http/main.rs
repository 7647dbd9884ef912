//! The SGLang HTTP API of one in-process sim: shapes, DP ranks, faults, disconnects.

#[path = "../harness/mod.rs"]
mod harness;

mod faults;
mod info;
mod ranks;
mod shapes;
