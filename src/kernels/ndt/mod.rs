//! NDT kernels: the fused derivative kernel ([`derivatives`], a folder: its `mod.rs` holds the
//! ABI and the context its parts share) and the building blocks it is made of — an f64 `exp`
//! ([`fp64`]), the rotation and its angular derivatives evaluated with the CPU reference's exact
//! operation order ([`rotation`]), and a deterministic warp/block reduction of many values at once
//! ([`reduce`]).

pub mod derivatives;
pub mod fp64;
pub mod reduce;
pub mod rotation;
pub mod solve;

/// The index pairs `(i, j)`, `i ≤ j < 3`, of a symmetric 3×3 matrix's upper triangle, row-major:
/// the order of the stored inverse covariances, of the pairs of angles of the second derivatives
/// (`aa, ab, ac, bb, bc, cc`) and of the per-point `Q` sums.
pub const UPPER_PAIRS: [(usize, usize); 6] = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)];
