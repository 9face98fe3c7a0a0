//! [`super::align_batch`] with two groups in flight ([`SplitLinearize`]): the first half of
//! the jobs is group 0, the rest group 1. While the device evaluates one group's round, the
//! host feeds the other group's results to its solvers and submits that group's next round, so
//! the host's Newton updates overlap the device's work instead of following it. Every solver
//! sees the same linearizations in the same order as in lockstep, so the results are equal.

use super::pool::Pool;
use super::{feed_round, requests_of, AlignJob, Newton};
use crate::ndt::linearize::SplitLinearize;
use crate::Result;

/// Runs every state to completion through `lin`'s two groups; the solver updates run on
/// `pool` when given (`pool.rs`).
pub(super) fn run(
    lin: &mut dyn SplitLinearize,
    states: &mut [Newton],
    jobs: &[AlignJob],
    pool: Option<&Pool>,
) -> Result<()> {
    let half = states.len().div_ceil(2);
    let (first, second) = states.split_at_mut(half);
    let mut groups = [(first, &jobs[..half]), (second, &jobs[half..])];
    // The state indices (within the group) of each group's round in flight, if any.
    let mut in_flight: [Option<Vec<usize>>; 2] = [None, None];
    for (g, (st, jb)) in groups.iter().enumerate() {
        in_flight[g] = submit(lin, g, st, jb)?;
    }
    while in_flight.iter().any(Option::is_some) {
        for (g, (st, jb)) in groups.iter_mut().enumerate() {
            let Some(who) = in_flight[g].take() else {
                continue;
            };
            let out = lin.complete(g)?;
            match pool {
                Some(p) => super::pool::feed_round(p, st, who, out)?,
                None => feed_round(st, who, out)?,
            }
            in_flight[g] = submit(lin, g, st, jb)?;
        }
    }
    Ok(())
}

/// Submits the group's next round; `None` when every state of the group has finished.
fn submit(
    lin: &mut dyn SplitLinearize,
    group: usize,
    states: &[Newton],
    jobs: &[AlignJob],
) -> Result<Option<Vec<usize>>> {
    let (who, requests) = requests_of(states, jobs);
    if requests.is_empty() {
        return Ok(None);
    }
    lin.submit(group, &requests)?;
    Ok(Some(who))
}
