//! A point cloud as NDT uses it: x/y/z in metres as `f32`, every point finite.
//!
//! Readers drop NaN and infinite points (LiDAR drivers write NaN for "no return") and count them in
//! [`PointCloud::dropped_non_finite`] so the caller can report how many were lost.

/// Finite 3-D points (metres) plus how many non-finite points the reader dropped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PointCloud {
    /// x, y, z in metres; all finite.
    pub points: Vec<[f32; 3]>,
    /// Points the source held that had a NaN or infinite coordinate and were dropped.
    pub dropped_non_finite: usize,
}

impl PointCloud {
    /// Keeps the finite points of `points` and counts the others.
    pub fn from_points(points: impl IntoIterator<Item = [f32; 3]>) -> Self {
        let mut cloud = PointCloud::default();
        for p in points {
            cloud.push(p);
        }
        cloud
    }

    /// Appends `p` when all three coordinates are finite, else counts it as dropped.
    pub fn push(&mut self, p: [f32; 3]) {
        if p.iter().all(|c| c.is_finite()) {
            self.points.push(p);
        } else {
            self.dropped_non_finite += 1;
        }
    }

    /// Number of (finite) points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when no finite point is left.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Axis-aligned bounds `(min, max)` in metres; `None` for an empty cloud.
    pub fn bounds(&self) -> Option<([f32; 3], [f32; 3])> {
        let first = *self.points.first()?;
        let mut lo = first;
        let mut hi = first;
        for p in &self.points {
            for k in 0..3 {
                lo[k] = lo[k].min(p[k]);
                hi[k] = hi[k].max(p[k]);
            }
        }
        Some((lo, hi))
    }

    /// The cloud with every point mapped through `t` (f64 maths, stored back as f32).
    pub fn transformed(&self, t: &nalgebra::Isometry3<f64>) -> PointCloud {
        let points = self
            .points
            .iter()
            .map(|p| {
                let q = t * nalgebra::Point3::new(p[0] as f64, p[1] as f64, p[2] as f64);
                [q.x as f32, q.y as f32, q.z as f32]
            })
            .collect();
        PointCloud {
            points,
            dropped_non_finite: self.dropped_non_finite,
        }
    }
}
