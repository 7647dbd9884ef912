//! Building a [`WorkerRecord`] by name instead of a ten-field literal: what tests, benchmarks
//! and the test kit write when they describe a worker they did not plan from a deployment file.

use std::collections::BTreeMap;

use super::{KvEventsSource, WorkerRecord};
use crate::types::{ModelName, Role, WorkerId};

impl WorkerRecord {
    /// A worker with one rank, page size 1, no bootstrap port, no KV events, no labels.
    pub fn new(id: &str, role: Role, url: impl Into<String>, model: &str) -> Self {
        Self {
            id: WorkerId::new(id),
            role,
            url: url.into(),
            model: ModelName::new(model),
            bootstrap_port: None,
            dp_size: 1,
            page_size: 1,
            transfer_backend: None,
            kv_cache_dtype: None,
            sglang_version: None,
            kv_events: None,
            load_events: None,
            labels: BTreeMap::new(),
        }
    }

    /// A prefill worker with its PD bootstrap port.
    pub fn prefill(id: &str, url: impl Into<String>, model: &str, bootstrap_port: u16) -> Self {
        Self::new(id, Role::Prefill, url, model).with_bootstrap_port(bootstrap_port)
    }

    /// A decode worker with `dp_size` attention-DP ranks.
    pub fn decode(id: &str, url: impl Into<String>, model: &str, dp_size: u32) -> Self {
        Self::new(id, Role::Decode, url, model).with_dp_size(dp_size)
    }

    /// An aggregated worker with `dp_size` attention-DP ranks.
    pub fn mixed(id: &str, url: impl Into<String>, model: &str, dp_size: u32) -> Self {
        Self::new(id, Role::Mixed, url, model).with_dp_size(dp_size)
    }

    /// With `dp_size` attention-DP ranks.
    pub fn with_dp_size(mut self, dp_size: u32) -> Self {
        self.dp_size = dp_size;
        self
    }

    /// With this PD bootstrap port.
    pub fn with_bootstrap_port(mut self, port: u16) -> Self {
        self.bootstrap_port = Some(port);
        self
    }

    /// With this KV page size.
    pub fn with_page_size(mut self, page_size: u32) -> Self {
        self.page_size = page_size;
        self
    }

    /// Moving KV with this transfer backend (`mooncake`, `nixl`, …).
    pub fn with_transfer_backend(mut self, backend: impl Into<String>) -> Self {
        self.transfer_backend = Some(backend.into());
        self
    }

    /// With this KV cache data type (`auto`, `fp8_e4m3`, …).
    pub fn with_kv_cache_dtype(mut self, dtype: impl Into<String>) -> Self {
        self.kv_cache_dtype = Some(dtype.into());
        self
    }

    /// Publishing KV events on these sockets.
    pub fn with_kv_events(mut self, kv_events: KvEventsSource) -> Self {
        self.kv_events = Some(kv_events);
        self
    }

    /// Publishing its ranks' load from this socket (rank 0's; rank `r` on port + `r`).
    pub fn with_load_events(mut self, endpoint: impl Into<String>) -> Self {
        self.load_events = Some(endpoint.into());
        self
    }

    /// Running this SGLang version.
    pub fn with_sglang_version(mut self, version: impl Into<String>) -> Self {
        self.sglang_version = Some(version.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_fill_what_a_literal_would() {
        let p = WorkerRecord::prefill("p", "http://127.0.0.1:1", "m", 8998).with_page_size(64);
        assert_eq!((p.role, p.bootstrap_port, p.dp_size, p.page_size), (Role::Prefill, Some(8998), 1, 64));
        assert_eq!(p.check(), Ok(()));
        let d = WorkerRecord::decode("d", "http://127.0.0.1:2", "m", 8).with_sglang_version("0.5.23");
        assert_eq!((d.role, d.bootstrap_port, d.dp_size), (Role::Decode, None, 8));
        assert_eq!(d.sglang_version.as_deref(), Some("0.5.23"));
        assert_eq!(WorkerRecord::mixed("x", "http://h:3", "m", 2).role, Role::Mixed);
        assert_eq!(d.check(), Ok(()));
    }
}
