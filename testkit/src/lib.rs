//! infera-testkit: the one kit the workspace's cluster tests, benchmarks and the demo start
//! deployments with. Every socket is bound on port 0; nothing waits on a sleep.
//!
//! - [`eventually`]: poll a condition with a deadline and a message that names it.
//! - [`sim`]: emulated SGLang workers from the launcher's typed SGLang arguments, with the
//!   worker record the launcher would register.
//! - [`engine`]: real SGLang 0.5.23 servers on this machine's CPUs (the tiny model), described
//!   like sims and rendered by the launcher.
//! - [`control`], [`proxy`]: `infera-control` and `infera-proxy` with the flags a test gives.
//! - [`cluster`]: all of them together, with a static workers file or a real etcd ([`etcd`]:
//!   the Debian `etcd-server` on loopback, plain or secured with TLS, client certificates and
//!   infera's roles, and clients without the right credentials to try it with).
//! - [`node`]: how a part runs — a task in this process ([`server`]) or a child process
//!   ([`process`]) that can be SIGKILLed, paused and restarted on the same ports.
//! - [`engine_stub`]: engines that answer only `/server_info`, for records no request reaches.
//! - [`http`]: a small probe client and a metric reader; [`sse`]: server-sent event bodies
//!   parsed, and streams read event by event on a connection of their own that can hang up.
//! - [`ports`]: free loopback ports for servers that cannot be given port 0.
//! - [`tls`]: a CA made at run time that issues server and client certificates;
//!   [`credentials`]: proxy tokens for control's Router and control's tokens file.
//! - [`shape`]: compares two JSON values by shape (names, types, presence, ranges) with an
//!   allow-list of intended differences; [`conformance_cases`]: the requests the sim is held to
//!   SGLang with, and the differences it may keep.
//! - [`replicas`]: several controls electing a leader through etcd (HA), optionally each in a
//!   network namespace of its own ([`netns`]) so that links can be cut.

pub mod attack;
pub mod cluster;
pub mod conformance_cases;
pub mod control;
pub mod credentials;
pub mod engine;
pub mod engine_stub;
pub mod etcd;
pub mod eventually;
pub mod http;
pub mod netns;
pub mod node;
pub mod ports;
pub mod process;
pub mod proxy;
pub mod replicas;
pub mod server;
pub mod shape;
pub mod sim;
pub mod sse;
pub mod tls;

pub use cluster::{Cluster, ClusterSpec};
pub use control::{Control, ControlSpec, Ledger, Workers};
pub use credentials::{ApiKeys, RouterTokens, Token};
pub use engine::{Engine, EngineSpec};
pub use engine_stub::EngineStubs;
pub use etcd::EtcdServer;
pub use eventually::{eventually, eventually_blocking, poll, poll_blocking};
pub use infera_registry::register::Registration;
pub use proxy::{Proxy, ProxySpec};
pub use replicas::Replicas;
pub use sim::{Sim, SimSpec};
