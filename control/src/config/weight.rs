//! `--decode-request-weight`: a pinned W, or `auto` (fitted online).

use infera_proto::types::RequestWeight;

/// `--decode-request-weight`: a number, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum WeightArg {
    Pinned(RequestWeight),
    Auto,
}

impl std::str::FromStr for WeightArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("auto") {
            Ok(Self::Auto)
        } else {
            s.parse().map(Self::Pinned).map_err(|e| format!("{e} (or `auto`)"))
        }
    }
}
