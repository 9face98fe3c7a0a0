//! `rnn_gru_rollout`: both GRU paths in one kernel, picked at run time by the `stationary`
//! parameter ([`stationary`](super::stationary) when non-zero, else [`shared`](super::shared)).
//! `stamps` (0 or `stationary::STAMPS` u64): block 0's clock stamps on the stationary path.

use super::{kernel, shared, stationary};
use crate::ptx::*;

/// Builds the module.
pub fn build(target: Target) -> Module {
    kernel(target, "rnn_gru_rollout", |b, c| {
        b.if_else(
            c.p.stationary,
            |b| stationary::rollout::rollout(b, c),
            |b| shared::rollout(b, c),
        )
    })
}
