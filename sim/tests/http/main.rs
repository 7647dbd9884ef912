//! The SGLang HTTP API of one in-process sim: shapes, pooling, tokenize, DP ranks, faults,
//! disconnects.

#[path = "../harness/mod.rs"]
mod harness;

mod faults;
mod info;
mod pooling;
mod ranks;
mod shapes;
mod tokenize;
