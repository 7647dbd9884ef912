//! Persisted admin settings under `/infera/v1/config/{name}`, so a restarted control (or a
//! second one) starts with what operators last set at run time.

use std::collections::BTreeMap;

use etcd_client::GetOptions;

use crate::{EtcdConfig, RegistryError, connect, keys};

/// Every persisted setting, by name.
pub async fn load(etcd: &EtcdConfig) -> Result<BTreeMap<String, String>, RegistryError> {
    let mut client = connect(etcd).await?;
    let resp = client.get(keys::CONFIG, Some(GetOptions::new().with_prefix())).await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|kv| {
            let name = kv.key_str().ok()?.strip_prefix(keys::CONFIG)?.to_owned();
            Some((name, kv.value_str().ok()?.to_owned()))
        })
        .collect())
}

/// Stores settings (all of them in one transaction, so readers never see half a change).
pub async fn store(etcd: &EtcdConfig, settings: &[(&str, String)]) -> Result<(), RegistryError> {
    let mut client = connect(etcd).await?;
    let ops: Vec<etcd_client::TxnOp> = settings
        .iter()
        .map(|(name, value)| etcd_client::TxnOp::put(keys::config(name), value.as_str(), None))
        .collect();
    client.txn(etcd_client::Txn::new().and_then(ops)).await?;
    Ok(())
}
