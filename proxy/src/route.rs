//! Route one request: both picks at once for a PD model (one round trip), one pick for an
//! aggregated model.

use std::sync::Arc;

use infera_proto::types::{ModelName, PickKind, ReleaseReason, Target};

use crate::control::{ControlLink, Pick, PickError};
use crate::error::{Leg, ProxyError};
use crate::facts::Facts;

/// Where one request goes.
#[derive(Debug)]
pub struct Route {
    /// The model it was routed for.
    pub model: ModelName,
    /// The prefill leg (PD models).
    pub prefill: Option<Pick>,
    /// The decode leg (or the only leg).
    pub decode: Pick,
}

/// The targets a request already failed on, per leg: its retries pass them by.
#[derive(Clone, Debug, Default)]
pub struct Exclude {
    /// Prefill targets.
    pub prefill: Vec<Target>,
    /// Decode targets.
    pub decode: Vec<Target>,
}

/// Picks the legs of a request, passing by the targets in `exclude`. A model not yet in the
/// target list is tried as PD; control refuses the prefill pick of an aggregated model with
/// `NO_POOL`.
pub async fn route(link: &Arc<ControlLink>, facts: &Facts, exclude: &Exclude) -> Result<Route, ProxyError> {
    let list = link.targets();
    let model = match facts.model.clone().or_else(|| list.only_model()) {
        Some(m) => m,
        None => {
            return Err(ProxyError::BadRequest("model is required: the deployment serves several models"));
        }
    };
    if list.is_pd(&model) == Some(false) {
        let decode = link.pick(PickKind::Decode, facts, &model, &exclude.decode).await;
        let decode = decode.map_err(|e| e.into_proxy_error(&model, Leg::Decode))?;
        return Ok(Route { model, prefill: None, decode });
    }
    let (prefill, decode) = tokio::join!(
        link.pick(PickKind::Prefill, facts, &model, &exclude.prefill),
        link.pick(PickKind::Decode, facts, &model, &exclude.decode)
    );
    match (prefill, decode) {
        (Ok(p), Ok(d)) => Ok(Route { model, prefill: Some(p), decode: d }),
        (Err(PickError::NoPool), Ok(d)) => Ok(Route { model, prefill: None, decode: d }),
        (Ok(p), Err(e)) => {
            p.release(ReleaseReason::Failed);
            Err(e.into_proxy_error(&model, Leg::Decode))
        }
        (Err(e), Ok(d)) => {
            d.release(ReleaseReason::Failed);
            Err(e.into_proxy_error(&model, Leg::Prefill))
        }
        (Err(e), Err(_)) => Err(e.into_proxy_error(&model, Leg::Prefill)),
    }
}
