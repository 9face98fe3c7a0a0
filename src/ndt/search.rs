//! Which voxels a transformed source point is scored against (ndt_omp's neighbour search modes).
//!
//! With `c = floor(p / resolution_m)` the point's own voxel coordinates:
//! - [`NeighbourSearch::Direct1`]: voxel `c` only (fastest, needs a good initial pose);
//! - [`NeighbourSearch::Direct7`]: `c` and its 6 face neighbours `c ± e_x, c ± e_y, c ± e_z`;
//! - [`NeighbourSearch::Direct27`]: the 3×3×3 block around `c`;
//! - [`NeighbourSearch::Radius`]: every voxel whose *mean* lies within `resolution_m` of the point,
//!   which is what PCL's NDT finds with a k-d tree radius search over the voxel means. A mean within
//!   one voxel side of the point lies in the 3×3×3 block around `c`, so probing that block and
//!   filtering by distance gives exactly the radius search's set.
//!
//! The probe order (offset tables below) is fixed so the GPU kernel can use the same tables.

use crate::ndt::voxel_map::VoxelMap;
use crate::{Error, Result};

/// Neighbour-search mode; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum NeighbourSearch {
    /// The point's own voxel.
    Direct1,
    /// Own voxel and the 6 face neighbours.
    #[default]
    Direct7,
    /// Own voxel and all 26 neighbours.
    Direct27,
    /// All voxels whose mean lies within `resolution_m` (PCL's radius search).
    Radius,
}

/// Offsets for [`NeighbourSearch::Direct7`], own voxel first.
pub const DIRECT7_OFFSETS: [[i32; 3]; 7] = [
    [0, 0, 0],
    [1, 0, 0],
    [-1, 0, 0],
    [0, 1, 0],
    [0, -1, 0],
    [0, 0, 1],
    [0, 0, -1],
];

/// Offsets for [`NeighbourSearch::Direct27`] and [`NeighbourSearch::Radius`]: own voxel first, then
/// x-fastest order over `{-1, 0, 1}³` without the centre.
pub const DIRECT27_OFFSETS: [[i32; 3]; 27] = {
    let mut t = [[0i32; 3]; 27];
    let mut n = 1;
    let mut z = -1;
    while z <= 1 {
        let mut y = -1;
        while y <= 1 {
            let mut x = -1;
            while x <= 1 {
                if !(x == 0 && y == 0 && z == 0) {
                    t[n] = [x, y, z];
                    n += 1;
                }
                x += 1;
            }
            y += 1;
        }
        z += 1;
    }
    t
};

impl NeighbourSearch {
    /// The voxel-coordinate offsets probed around the point's own voxel.
    pub fn offsets(self) -> &'static [[i32; 3]] {
        match self {
            NeighbourSearch::Direct1 => &DIRECT7_OFFSETS[..1],
            NeighbourSearch::Direct7 => &DIRECT7_OFFSETS,
            NeighbourSearch::Direct27 | NeighbourSearch::Radius => &DIRECT27_OFFSETS,
        }
    }

    /// Lower-case name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            NeighbourSearch::Direct1 => "direct1",
            NeighbourSearch::Direct7 => "direct7",
            NeighbourSearch::Direct27 => "direct27",
            NeighbourSearch::Radius => "radius",
        }
    }

    /// Every mode, for tests and benches.
    pub const ALL: [NeighbourSearch; 4] = [
        NeighbourSearch::Direct1,
        NeighbourSearch::Direct7,
        NeighbourSearch::Direct27,
        NeighbourSearch::Radius,
    ];
}

impl std::str::FromStr for NeighbourSearch {
    type Err = Error;
    /// Parses `direct1`, `direct7`, `direct27` (or `direct26`) and `radius` (or `kdtree`).
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "direct1" => NeighbourSearch::Direct1,
            "direct7" => NeighbourSearch::Direct7,
            "direct27" | "direct26" => NeighbourSearch::Direct27,
            "radius" | "kdtree" => NeighbourSearch::Radius,
            other => {
                return Err(Error::input(format!(
                    "unknown neighbour search `{other}` (use direct1, direct7, direct27 or radius)"
                )))
            }
        })
    }
}

impl VoxelMap {
    /// Calls `f(voxel)` for every voxel that `search` pairs with point `p` (metres).
    #[inline]
    pub fn for_each_neighbour(
        &self,
        p: [f64; 3],
        search: NeighbourSearch,
        mut f: impl FnMut(usize),
    ) {
        let Some(c) = self.cell_of(p) else { return };
        let r2 = self.resolution_m() * self.resolution_m();
        for o in search.offsets() {
            let Some(v) = self.hash().get([c[0] + o[0], c[1] + o[1], c[2] + o[2]]) else {
                continue;
            };
            if search == NeighbourSearch::Radius {
                let m = self.means()[v];
                let d2 = (p[0] - m[0]).powi(2) + (p[1] - m[1]).powi(2) + (p[2] - m[2]).powi(2);
                if d2 > r2 {
                    continue;
                }
            }
            f(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_tables() {
        assert_eq!(DIRECT27_OFFSETS[0], [0, 0, 0]);
        let mut all = DIRECT27_OFFSETS.to_vec();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 27);
        assert_eq!(NeighbourSearch::Direct1.offsets(), &[[0, 0, 0]]);
        assert_eq!(
            "Direct27".parse::<NeighbourSearch>().unwrap(),
            NeighbourSearch::Direct27
        );
        assert!("nearest".parse::<NeighbourSearch>().is_err());
    }
}
