//! Settings of an NDT alignment, with the defaults of PCL / ndt_omp where they exist.

use crate::ndt::line_search::LineSearchParams;
use crate::ndt::search::NeighbourSearch;
use crate::{Error, Result};

/// The objective (map and score) and the solver; [`NdtParams::default`] gives PCL's resolution,
/// outlier ratio, step cap and iteration cap with ndt_omp's default search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NdtParams {
    /// Voxel side of the target map in metres (PCL default 1.0).
    pub resolution_m: f64,
    /// Fraction of points assumed to be outliers, in (0, 1) (PCL default 0.55).
    pub outlier_ratio: f64,
    /// Which voxels each point is scored against.
    pub search: NeighbourSearch,
    /// Newton iteration settings.
    pub solver: SolverParams,
}

/// Newton iteration settings (all a [`crate::ndt::Linearize`]-driven solve needs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SolverParams {
    /// Most Newton steps (PCL default 35).
    pub max_iterations: usize,
    /// Cap on the length of one step in the 6-D parameter space (metres and radians mixed, as
    /// PCL's `step_size`, default 0.1).
    pub step_max: f64,
    /// Converged when the Newton increment's translation is below this (metres)…
    pub translation_epsilon_m: f64,
    /// …and its rotation (norm of the angle increments) below this (radians).
    pub rotation_epsilon_rad: f64,
    /// Moré–Thuente line search along the Newton direction; `None` takes the capped step as is.
    pub line_search: Option<LineSearchParams>,
}

impl Default for SolverParams {
    fn default() -> Self {
        SolverParams {
            max_iterations: 35,
            step_max: 0.1,
            translation_epsilon_m: 1e-3,
            rotation_epsilon_rad: 1e-4,
            line_search: Some(LineSearchParams::default()),
        }
    }
}

impl Default for NdtParams {
    fn default() -> Self {
        NdtParams {
            resolution_m: 1.0,
            outlier_ratio: 0.55,
            search: NeighbourSearch::Direct7,
            solver: SolverParams::default(),
        }
    }
}

fn positive(name: &str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::input(format!(
            "NDT {name} must be positive and finite, got {v}"
        )))
    }
}

impl SolverParams {
    /// Checks every field; [`Error::Input`] names the first bad one.
    pub fn validate(&self) -> Result<()> {
        positive("step_max", self.step_max)?;
        positive("translation_epsilon_m", self.translation_epsilon_m)?;
        positive("rotation_epsilon_rad", self.rotation_epsilon_rad)?;
        if let Some(ls) = self.line_search {
            if !(0.0 < ls.mu && ls.mu < ls.eta && ls.eta < 1.0 && ls.max_evaluations > 0) {
                return Err(Error::input(format!(
                    "NDT line search needs 0 < mu < eta < 1, got {ls:?}"
                )));
            }
        }
        Ok(())
    }
}

impl NdtParams {
    /// Checks every field; [`Error::Input`] names the first bad one.
    pub fn validate(&self) -> Result<()> {
        positive("resolution_m", self.resolution_m)?;
        if !(self.outlier_ratio > 0.0 && self.outlier_ratio < 1.0) {
            return Err(Error::input(format!(
                "NDT outlier_ratio must lie in (0, 1), got {}",
                self.outlier_ratio
            )));
        }
        self.solver.validate()
    }
}
