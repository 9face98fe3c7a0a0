//! The one point type shared by every domain: `[T; 3]` (x, y, z), and zero-copy views between
//! a slice of points and the flat `x0 y0 z0 x1 y1 z1 ...` slice some APIs take.
//!
//! NDT ([`crate::ndt`]) takes `&[[f32; 3]]` (metres, as [`crate::ndt::PointCloud::points`] holds
//! them); the Gaussian field ([`crate::gaussian`]) takes points as a flat `&[T]` of xyz triples
//! (its GPU kernels read that layout as is). Both are the same bytes: [`as_flat`] and
//! [`as_points`] convert either way without copying, so a cloud read for NDT goes straight into a
//! field:
//!
//! ```
//! use ptxflow::points::{as_flat, as_points};
//! let cloud: Vec<[f32; 3]> = vec![[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]];
//! let flat: &[f32] = as_flat(&cloud);
//! assert_eq!(flat, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
//! let back: &[[f32; 3]] = as_points(flat).unwrap();
//! assert_eq!(back, &cloud[..]);
//! ```
//!
//! nalgebra points convert one by one (`Point3::from(p)`, `p.into()`); the conversion is free
//! after optimisation but the slice is not reinterpreted in place.

use crate::{Error, Result};

/// Views points as one flat slice `x0 y0 z0 x1 y1 z1 ...` (length `3 * points.len()`), without
/// copying.
pub fn as_flat<T>(points: &[[T; 3]]) -> &[T] {
    points.as_flattened()
}

/// Mutable form of [`as_flat`].
pub fn as_flat_mut<T>(points: &mut [[T; 3]]) -> &mut [T] {
    points.as_flattened_mut()
}

/// Views a flat slice of xyz triples as points, without copying.
///
/// Errors: [`Error::Shape`] when `flat.len()` is not a multiple of 3.
pub fn as_points<T>(flat: &[T]) -> Result<&[[T; 3]]> {
    if !flat.len().is_multiple_of(3) {
        return Err(Error::Shape {
            what: "flat point slice (xyz triples)".into(),
            expected: "a multiple of 3 values".into(),
            got: flat.len().to_string(),
        });
    }
    // SAFETY: `[T; 3]` has the size of three `T` and the alignment of `T`, with no padding, so
    // `flat.len() / 3` arrays cover exactly the `flat.len()` initialised values `flat` borrows;
    // the returned slice borrows `flat` for the same lifetime.
    Ok(unsafe { std::slice::from_raw_parts(flat.as_ptr().cast::<[T; 3]>(), flat.len() / 3) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_round_trip_and_reject_partial_points() {
        let mut pts = vec![[1.0f64, 2.0, 3.0], [4.0, 5.0, 6.0]];
        assert_eq!(as_flat(&pts).len(), 6);
        as_flat_mut(&mut pts)[4] = 9.0;
        assert_eq!(pts[1], [4.0, 9.0, 6.0]);
        let flat = [0.5f32; 7];
        assert!(matches!(as_points(&flat), Err(Error::Shape { .. })));
        assert_eq!(as_points(&flat[..6]).unwrap().len(), 2);
        assert!(as_points::<f32>(&[]).unwrap().is_empty());
    }
}
