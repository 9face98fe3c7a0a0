//! [`super::align_batch`] with two groups in flight ([`SplitLinearize`]): the first half of
//! the jobs is group 0, the rest group 1. While the device evaluates one group's round, the
//! host feeds the other group's results to its solvers and submits that group's next round, so
//! the host's Newton updates overlap the device's work instead of following it. Every solver
//! sees the linearizations of its own poses in its own order, as in lockstep.
//!
//! The tail: once at most [`SplitLinearize::merge_tail`] alignments are unfinished, both
//! groups' rounds are allowed to finish and every unfinished alignment then runs in group 0,
//! one round at a time, so each round of the tail is one launch instead of two.

use super::pool::Pool;
use super::{feed_round, requests_of, AlignJob, Linearization, Newton};
use crate::ndt::linearize::SplitLinearize;
use crate::Result;

/// Runs every state to completion through `lin`'s two groups; the solver updates run on
/// `pool` when given (`pool.rs`). Ends with [`SplitLinearize::finish_split`], also on errors.
pub(super) fn run(
    lin: &mut dyn SplitLinearize,
    states: &mut [Newton],
    jobs: &[AlignJob],
    pool: Option<&Pool>,
) -> Result<()> {
    let run = groups(lin, states, jobs, pool);
    let finish = lin.finish_split();
    run?;
    finish
}

/// [`run`] up to the finish.
fn groups(
    lin: &mut dyn SplitLinearize,
    states: &mut [Newton],
    jobs: &[AlignJob],
    pool: Option<&Pool>,
) -> Result<()> {
    let half = states.len().div_ceil(2);
    // Group 0 has room for the first half's requests, so a merged round must fit that.
    let merge_at = lin.merge_tail().min(half);
    let mut merging = false;
    {
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
                feed(pool, st, who, out)?;
                if !merging && merge_at > 0 {
                    let other = in_flight[1 - g].as_ref().map_or(0, Vec::len);
                    let here = st.iter().filter(|s| s.wants().is_some()).count();
                    merging = here + other <= merge_at;
                }
                if !merging {
                    in_flight[g] = submit(lin, g, st, jb)?;
                }
            }
        }
    }
    if merging {
        while let Some(who) = submit(lin, 0, states, jobs)? {
            let out = lin.complete(0)?;
            feed(pool, states, who, out)?;
        }
    }
    Ok(())
}

/// Feeds a round's results to `states[who[i]]`, on `pool` when given.
fn feed(
    pool: Option<&Pool>,
    states: &mut [Newton],
    who: Vec<usize>,
    out: Vec<Linearization>,
) -> Result<()> {
    match pool {
        Some(p) => super::pool::feed_round(p, states, who, out),
        None => feed_round(states, who, out),
    }
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
