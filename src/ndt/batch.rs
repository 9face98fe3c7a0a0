//! Many alignments against one target map in lockstep: initial-pose hypotheses for one scan (or
//! jobs over several scans), every result, and the best one.
//!
//! [`align_hypotheses`] runs [`align_batch`]: each round sends one request per unfinished
//! alignment in a single [`Linearize::linearize`] call, which the GPU pipeline serves with one
//! launch. The best result is the converged one with the highest score (summed likelihood);
//! when none converged, the highest score overall.

use crate::ndt::linearize::Linearize;
use crate::ndt::params::SolverParams;
use crate::ndt::result::NdtResult;
use crate::ndt::solver::{align_batch, AlignJob};
use crate::rng::Rng;
use crate::{Error, Result};
use nalgebra::{Isometry3, Translation3, UnitQuaternion};

/// Every result of a batch, in job order, and the index of the best.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchReport {
    /// One result per job.
    pub results: Vec<NdtResult>,
    /// Index of the best result ([`best_result`]); `None` only for an empty batch.
    pub best: Option<usize>,
}

impl BatchReport {
    /// The best result, if any.
    pub fn best_result(&self) -> Option<&NdtResult> {
        self.best.map(|i| &self.results[i])
    }
}

/// Index of the best of `results`: converged before not converged, then the highest score, then
/// the lowest index. `None` when empty.
pub fn best_result(results: &[NdtResult]) -> Option<usize> {
    let key = |r: &NdtResult| {
        (
            r.stop.converged(),
            if r.score.is_finite() {
                r.score
            } else {
                f64::NEG_INFINITY
            },
        )
    };
    let mut best: Option<usize> = None;
    for (i, r) in results.iter().enumerate() {
        let better = match best {
            None => true,
            Some(b) => {
                let (kb, kr) = (key(&results[b]), key(r));
                (kr.0 && !kb.0) || (kr.0 == kb.0 && kr.1 > kb.1)
            }
        };
        if better {
            best = Some(i);
        }
    }
    best
}

/// `count` initial poses around `center`: `center` itself first, then perturbations `Δ · center`
/// with translation uniform in `±translation_m` per axis and roll, pitch, yaw uniform in
/// `±rotation_deg`, drawn from a generator seeded with `seed`.
///
/// Errors: [`Error::Input`] for negative or non-finite ranges; [`Error::Capacity`] for a `count`
/// the host cannot hold.
pub fn hypotheses(
    center: &Isometry3<f64>,
    count: usize,
    translation_m: f64,
    rotation_deg: f64,
    seed: u64,
) -> Result<Vec<Isometry3<f64>>> {
    if !(translation_m >= 0.0
        && translation_m.is_finite()
        && rotation_deg >= 0.0
        && rotation_deg.is_finite())
    {
        return Err(Error::input(format!(
            "hypothesis ranges must be finite and non-negative, got {translation_m} m, {rotation_deg} deg"
        )));
    }
    let mut rng = Rng::new(seed);
    let mut out = crate::size::vec_with_capacity("NDT hypotheses", count)?;
    for i in 0..count {
        if i == 0 {
            out.push(*center);
            continue;
        }
        let mut u = |s: f64| rng.range(-s, s);
        let t = Translation3::new(u(translation_m), u(translation_m), u(translation_m));
        let r = rotation_deg.to_radians();
        let q = UnitQuaternion::from_euler_angles(u(r), u(r), u(r));
        out.push(Isometry3::from_parts(t, q) * center);
    }
    Ok(out)
}

/// Aligns source `source` of `lin` from every pose in `inits`, all in lockstep, and reports
/// every result and the best. Errors as [`align_batch`].
pub fn align_hypotheses<L: Linearize + ?Sized>(
    lin: &mut L,
    source: usize,
    inits: &[Isometry3<f64>],
    params: &SolverParams,
) -> Result<BatchReport> {
    let jobs: Vec<AlignJob> = inits
        .iter()
        .map(|init| AlignJob {
            source,
            init: *init,
        })
        .collect();
    let results = align_batch(lin, &jobs, params)?;
    let best = best_result(&results);
    Ok(BatchReport { results, best })
}
