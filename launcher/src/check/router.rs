//! `[router]`: the control and proxy settings a deployment forwards.

use clap::ValueEnum;
use infera_proto::types::{DecodeInputDemand, DecodePolicy, RequestWeight};

use super::Checker;
use crate::deployment::DeploymentFile;

/// Choices spell as the flags do; W > 0 needs a demand mode that scores.
pub(super) fn check(file: &DeploymentFile, c: &mut Checker<'_>) {
    let Some(router) = &file.router else { return };
    let demand = router.decode_input_demand.as_ref().and_then(|d| {
        let parsed = DecodeInputDemand::from_str(d.get_ref(), false).ok();
        if parsed.is_none() {
            c.at(d, "router.decode_input_demand", format!("{:?} is not one of off, shadow, on", d.get_ref()));
        }
        parsed
    });
    if let Some(p) = &router.decode_policy
        && DecodePolicy::from_str(p.get_ref(), false).is_err()
    {
        c.at(
            p,
            "router.decode_policy",
            format!("{:?} is not one of round-robin, random, power-of-two", p.get_ref()),
        );
    }
    let Some(w) = &router.decode_request_weight else { return };
    match RequestWeight::new(*w.get_ref()) {
        Err(e) => c.at(w, "router.decode_request_weight", e.to_string()),
        Ok(weight) if !weight.is_zero() && !demand.is_some_and(DecodeInputDemand::scores) => {
            let mode = demand.unwrap_or_default();
            c.at(
                w,
                "router.decode_request_weight",
                format!(
                    "W = {weight} needs router.decode_input_demand = \"shadow\" or \"on\" (got \"{mode}\"): W only \
                     takes part in the demand cost"
                ),
            );
        }
        Ok(_) => {}
    }
}
