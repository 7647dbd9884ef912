//! infera-tokenize end to end on tokenizers trained at run time: rendering, requests of every
//! API, the session cache against whole encodings, and loading files.

mod encoder;
mod load;
mod messages;
mod models;
mod render;
mod responses;
mod session;
mod support;
