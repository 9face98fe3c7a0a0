//! [`super::align_batch`] after [`Linearize::align_batch_whole`]: the jobs the implementation
//! left to the solver run on the host solver's batch, and the results merge in job order.

use super::{host_batch, AlignJob, Newton};
use crate::ndt::linearize::Linearize;
use crate::ndt::params::SolverParams;
use crate::ndt::result::NdtResult;
use crate::{Error, Result};

/// The jobs the batch device solve left (`None` in `done`) on the host solver, merged into
/// `done`'s results in job order.
pub(super) fn finish_on_host<L: Linearize + ?Sized>(
    lin: &mut L,
    jobs: &[AlignJob],
    params: &SolverParams,
    done: Vec<Option<NdtResult>>,
) -> Result<Vec<NdtResult>> {
    if done.len() != jobs.len() {
        return Err(Error::Shape {
            what: "results of Linearize::align_batch_whole".into(),
            expected: jobs.len().to_string(),
            got: done.len().to_string(),
        });
    }
    let left: Vec<AlignJob> = jobs
        .iter()
        .zip(&done)
        .filter(|(_, r)| r.is_none())
        .map(|(j, _)| *j)
        .collect();
    let states = left
        .iter()
        .map(|j| Newton::new(&j.init, lin.source_len(j.source), *params))
        .collect();
    let mut rest = host_batch(lin, &left, states)?.into_iter();
    Ok(done
        .into_iter()
        .map(|r| r.or_else(|| rest.next()))
        .collect::<Option<Vec<_>>>()
        .expect("one host result per job the device left"))
}
