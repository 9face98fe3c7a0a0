//! The 6-vector the NDT solver optimises, and its conversion to and from `Isometry3<f64>`.
//!
//! `p = [x, y, z, rx, ry, rz]`: translation in metres, Euler angles in radians with
//! `R = Rx(rx) · Ry(ry) · Rz(rz)` (rotation about the fixed x axis applied last), the
//! parametrisation of Magnusson's thesis and PCL's NDT. The transform maps source points into the
//! target frame: `x' = R x + t`. Library users pass and get `Isometry3<f64>`; this vector is the
//! coordinate system of gradients and Hessians (and of the [`crate::ndt::Linearize`] seam).

use nalgebra::{Isometry3, Matrix3, Translation3, UnitQuaternion, Vector3, Vector6};

/// `[x, y, z, rx, ry, rz]` in metres and radians, `R = Rx(rx) Ry(ry) Rz(rz)`.
pub type Pose6 = Vector6<f64>;

/// The rotation matrix `Rx(rx) Ry(ry) Rz(rz)` of a pose.
pub fn rotation_of(p: &Pose6) -> Matrix3<f64> {
    let q = UnitQuaternion::from_axis_angle(&Vector3::x_axis(), p[3])
        * UnitQuaternion::from_axis_angle(&Vector3::y_axis(), p[4])
        * UnitQuaternion::from_axis_angle(&Vector3::z_axis(), p[5]);
    q.to_rotation_matrix().into_inner()
}

/// The isometry `x ↦ R x + t` of a pose.
pub fn pose_to_isometry(p: &Pose6) -> Isometry3<f64> {
    let q = UnitQuaternion::from_axis_angle(&Vector3::x_axis(), p[3])
        * UnitQuaternion::from_axis_angle(&Vector3::y_axis(), p[4])
        * UnitQuaternion::from_axis_angle(&Vector3::z_axis(), p[5]);
    Isometry3::from_parts(Translation3::new(p[0], p[1], p[2]), q)
}

/// The pose of an isometry. With `R = Rx(a) Ry(b) Rz(c)`: `R[0,2] = sin b`,
/// `R[1,2] = −sin a cos b`, `R[2,2] = cos a cos b`, `R[0,1] = −cos b sin c`, `R[0,0] = cos b cos c`;
/// `b` is taken in [−π/2, π/2]. At `b = ±π/2` (gimbal lock) `c` is set to 0.
pub fn isometry_to_pose(t: &Isometry3<f64>) -> Pose6 {
    let r = t.rotation.to_rotation_matrix().into_inner();
    let b = r[(0, 2)].clamp(-1.0, 1.0).asin();
    let (a, c) = if r[(0, 2)].abs() < 1.0 - 1e-12 {
        ((-r[(1, 2)]).atan2(r[(2, 2)]), (-r[(0, 1)]).atan2(r[(0, 0)]))
    } else {
        // cos b = 0: only a ± c is defined; R[2,1] = sin(a ± c)-like terms give it with c = 0.
        (r[(2, 1)].atan2(r[(1, 1)]), 0.0)
    };
    let v = t.translation.vector;
    Pose6::new(v.x, v.y, v.z, a, b, c)
}

/// Translation error (m) and rotation error (degrees) between two transforms.
pub fn pose_error(estimate: &Isometry3<f64>, truth: &Isometry3<f64>) -> (f64, f64) {
    let delta = truth.inverse() * estimate;
    (
        delta.translation.vector.norm(),
        delta.rotation.angle().to_degrees(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_convention() {
        let p = Pose6::new(0.5, -1.0, 2.0, 0.3, -0.4, 1.2);
        let back = isometry_to_pose(&pose_to_isometry(&p));
        assert!((back - p).abs().max() < 1e-12);
        // Rx(a) Ry(b) Rz(c) applied to a point, written out by hand.
        let (a, b, c) = (p[3], p[4], p[5]);
        let rx = Matrix3::new(1.0, 0.0, 0.0, 0.0, a.cos(), -a.sin(), 0.0, a.sin(), a.cos());
        let ry = Matrix3::new(b.cos(), 0.0, b.sin(), 0.0, 1.0, 0.0, -b.sin(), 0.0, b.cos());
        let rz = Matrix3::new(c.cos(), -c.sin(), 0.0, c.sin(), c.cos(), 0.0, 0.0, 0.0, 1.0);
        assert!((rotation_of(&p) - rx * ry * rz).abs().max() < 1e-12);
        let lock = isometry_to_pose(&pose_to_isometry(&Pose6::new(
            0.0,
            0.0,
            0.0,
            0.2,
            std::f64::consts::FRAC_PI_2,
            0.0,
        )));
        assert!(
            (rotation_of(&lock)
                - rotation_of(&Pose6::new(
                    0.0,
                    0.0,
                    0.0,
                    0.2,
                    std::f64::consts::FRAC_PI_2,
                    0.0
                )))
            .abs()
            .max()
                < 1e-6
        );
    }
}
