//! The byte layouts the `ndt_derivatives` kernel reads and writes, packed and decoded on the host
//! (no GPU needed, so these are tested everywhere).
//!
//! - request ([`REQUEST_WORDS`] u64 = 80 bytes): the f64 bit patterns of `sin a, cos a, sin b,
//!   cos b, sin c, cos c, x, y, z` of the pose ([`crate::ndt::pose`]), then `first_point | count << 32`;
//!   the sines and cosines come from `f64::sin_cos`, as in [`crate::ndt::angles::AngleTerms::new`],
//!   so the kernel's rotation equals the CPU's bit for bit;
//! - voxel ([`VOXEL_VALUES`] f64): mean `[μx, μy, μz]` (m), then `C00 C01 C02 C11 C12 C22` of the
//!   inverse covariance (1/m², symmetric, so the upper triangle is all of it);
//! - result ([`VALUES`] f64): `Σe`, the gradient and Hessian sums before the factor `d1 d2`, and
//!   the correspondence count (see the kernel's docs).

use crate::kernels::ndt::derivatives::{hessian_index, COUNT_INDEX, GRADIENT_INDEX, SCORE_INDEX};
use crate::ndt::derivatives::GaussConstants;
use crate::ndt::linearize::Linearization;
use crate::ndt::pose::Pose6;
use crate::ndt::voxel_map::VoxelMap;
use crate::{Error, Result};
use nalgebra::{Matrix6, Vector6};

pub use crate::kernels::ndt::derivatives::{REQUEST_BYTES, RESULT_BYTES, VALUES};

/// u64 words per request.
pub const REQUEST_WORDS: usize = REQUEST_BYTES / 8;
/// f64 values per voxel record.
pub const VOXEL_VALUES: usize = 9;

/// The request record for `pose` over points `first .. first + count` of the point buffer.
pub fn pack_request(pose: &Pose6, first: u32, count: u32) -> [u64; REQUEST_WORDS] {
    let (sa, ca) = pose[3].sin_cos();
    let (sb, cb) = pose[4].sin_cos();
    let (sc, cc) = pose[5].sin_cos();
    let f = [sa, ca, sb, cb, sc, cc, pose[0], pose[1], pose[2]];
    let mut w = [0u64; REQUEST_WORDS];
    for (k, v) in f.iter().enumerate() {
        w[k] = v.to_bits();
    }
    w[9] = u64::from(first) | (u64::from(count) << 32);
    w
}

/// Appends the voxel records of `map` to `out` (cleared first).
pub fn pack_voxels(map: &VoxelMap, out: &mut Vec<f64>) {
    out.clear();
    out.reserve(map.len() * VOXEL_VALUES);
    for (m, c) in map.means().iter().zip(map.inv_covariances()) {
        out.extend_from_slice(m);
        out.extend_from_slice(&[c[0], c[1], c[2], c[4], c[5], c[8]]);
    }
}

/// Turns one result record into a [`Linearization`]: score `−d1 Σe`, gradient and Hessian times
/// `d1 d2`. Errors: [`Error::Kernel`] when the count is not an integer in `0..=source_len` or a
/// value is NaN where the kernel never produces one (a result the kernel did not write).
pub fn decode_result(v: &[f64], gauss: GaussConstants, source_len: usize) -> Result<Linearization> {
    if v.len() != VALUES {
        return Err(Error::Shape {
            what: "NDT result record".into(),
            expected: VALUES.to_string(),
            got: v.len().to_string(),
        });
    }
    let count = v[COUNT_INDEX];
    if !(count >= 0.0 && count <= source_len as f64 && count.fract() == 0.0)
        || v[SCORE_INDEX].is_nan()
    {
        return Err(Error::Kernel {
            kernel: "ndt_derivatives",
            code: 1,
            detail: format!(
                "result record not written or corrupt: count {count}, score sum {}",
                v[SCORE_INDEX]
            ),
        });
    }
    let f = gauss.d1 * gauss.d2;
    let gradient = Vector6::from_fn(|i, _| f * v[GRADIENT_INDEX + i]);
    let mut hessian = Matrix6::zeros();
    for i in 0..6 {
        for j in i..6 {
            let h = f * v[hessian_index(i, j)];
            hessian[(i, j)] = h;
            hessian[(j, i)] = h;
        }
    }
    Ok(Linearization {
        score: -gauss.d1 * v[SCORE_INDEX],
        gradient,
        hessian,
        correspondences: count as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_words_round_trip() {
        let p = Pose6::new(1.5, -2.0, 0.25, 0.1, -0.2, 3.0);
        let w = pack_request(&p, 7, 123_456);
        assert_eq!(f64::from_bits(w[0]), 0.1f64.sin());
        assert_eq!(f64::from_bits(w[5]), 3.0f64.cos());
        assert_eq!(f64::from_bits(w[8]), 0.25);
        // Little-endian: first point at byte 72, count at byte 76, as the kernel reads them.
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(u32::from_le_bytes(bytes[72..76].try_into().unwrap()), 7);
        assert_eq!(
            u32::from_le_bytes(bytes[76..80].try_into().unwrap()),
            123_456
        );
    }

    #[test]
    fn hessian_indices_cover_the_upper_triangle_once() {
        let mut seen = [false; VALUES];
        for i in 0..6 {
            for j in i..6 {
                let k = hessian_index(i, j);
                assert!(!seen[k], "({i}, {j})");
                seen[k] = true;
            }
        }
        assert_eq!(seen.iter().filter(|s| **s).count(), 21);
        assert!(seen[7..28].iter().all(|s| *s));
    }

    #[test]
    fn unwritten_results_are_errors() {
        let g = GaussConstants::new(1.0, 0.55).unwrap();
        let mut v = vec![0.0; VALUES];
        v[COUNT_INDEX] = 3.0;
        assert_eq!(decode_result(&v, g, 3).unwrap().correspondences, 3);
        v[COUNT_INDEX] = f64::NAN;
        assert!(decode_result(&v, g, 3).is_err());
        v[COUNT_INDEX] = 4.0;
        assert!(decode_result(&v, g, 3).is_err());
        assert!(decode_result(&v[..5], g, 3).is_err());
    }
}
