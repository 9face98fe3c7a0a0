//! Open-addressing hash table from integer voxel coordinates to voxel index, laid out so a GPU
//! kernel can probe it exactly as the CPU does.
//!
//! # Layout
//! `slots` is an array of `capacity` entries of four `i32` (16 bytes, one aligned vector load):
//! `[ix, iy, iz, voxel]`. `voxel == -1` ([`EMPTY`]) marks an empty slot (its coordinates are 0).
//! `capacity` is a power of two, at least 16 and at least twice the number of voxels, so the load
//! factor is at most 1/2 and every probe sequence reaches an empty slot.
//!
//! # Hash (all arithmetic on `u32`, wrapping)
//! ```text
//! h = (ix as u32) * 0x9E3779B1  ^  (iy as u32) * 0x85EBCA77  ^  (iz as u32) * 0xC2B2AE3D
//! h ^= h >> 16
//! h *= 0x7FEB352D
//! h ^= h >> 15
//! slot = h & (capacity - 1)
//! ```
//! `ix as u32` is the two's-complement bit pattern of the signed coordinate.
//!
//! # Probing
//! Linear: look at `slot`, then `(slot + 1) & (capacity - 1)`, and so on. Stop with a hit when the
//! slot's `[ix, iy, iz]` equals the key and `voxel != -1`, with a miss at the first empty slot.
//! Keys are unique; entries are never removed, so no tombstones exist.

/// Marker in the fourth lane of an empty slot.
pub const EMPTY: i32 = -1;

/// The table; see the module docs for the exact layout, hash and probing.
#[derive(Clone, Debug)]
pub struct VoxelHash {
    slots: Vec<[i32; 4]>,
    mask: u32,
}

/// The hash of a voxel key (module docs give the formula the GPU must reproduce).
#[inline]
pub fn hash_key(key: [i32; 3]) -> u32 {
    let mut h = (key[0] as u32).wrapping_mul(0x9E37_79B1)
        ^ (key[1] as u32).wrapping_mul(0x85EB_CA77)
        ^ (key[2] as u32).wrapping_mul(0xC2B2_AE3D);
    h ^= h >> 16;
    h = h.wrapping_mul(0x7FEB_352D);
    h ^ (h >> 15)
}

impl VoxelHash {
    /// Builds the table for `keys`, where `keys[v]` is voxel `v`'s coordinates (all distinct).
    ///
    /// Panics only if a key repeats (a broken invariant of the voxel-map builder) or if there are
    /// more than 2³⁰ voxels.
    pub fn build(keys: &[[i32; 3]]) -> VoxelHash {
        assert!(keys.len() < (1 << 30), "voxel hash: too many voxels");
        let capacity = (2 * keys.len()).next_power_of_two().max(16);
        let mut table = VoxelHash {
            slots: vec![[0, 0, 0, EMPTY]; capacity],
            mask: (capacity - 1) as u32,
        };
        for (v, &key) in keys.iter().enumerate() {
            let mut slot = hash_key(key) & table.mask;
            loop {
                let s = &mut table.slots[slot as usize];
                if s[3] == EMPTY {
                    *s = [key[0], key[1], key[2], v as i32];
                    break;
                }
                assert!(
                    [s[0], s[1], s[2]] != key,
                    "voxel hash: duplicate key {key:?}"
                );
                slot = (slot + 1) & table.mask;
            }
        }
        table
    }

    /// The voxel index stored for `key`, if any.
    #[inline]
    pub fn get(&self, key: [i32; 3]) -> Option<usize> {
        let mut slot = hash_key(key) & self.mask;
        loop {
            let s = self.slots[slot as usize];
            if s[3] == EMPTY {
                return None;
            }
            if s[0] == key[0] && s[1] == key[1] && s[2] == key[2] {
                return Some(s[3] as usize);
            }
            slot = (slot + 1) & self.mask;
        }
    }

    /// Number of slots (a power of two).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The raw slots `[ix, iy, iz, voxel]`, for upload to a device.
    pub fn slots(&self) -> &[[i32; 4]] {
        &self.slots
    }

    /// The slots as one flat `i32` array of length `4 · capacity`.
    pub fn slots_flat(&self) -> &[i32] {
        self.slots.as_flattened()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_key_and_misses_others() {
        let mut keys = Vec::new();
        for x in -6..6 {
            for y in -3..3 {
                for z in [-1, 0, 7] {
                    keys.push([x, y, z]);
                }
            }
        }
        let h = VoxelHash::build(&keys);
        assert!(h.capacity().is_power_of_two() && h.capacity() >= 2 * keys.len());
        for (v, &k) in keys.iter().enumerate() {
            assert_eq!(h.get(k), Some(v));
        }
        assert_eq!(h.get([100, 0, 0]), None);
        assert_eq!(h.get([0, 0, 1]), None);
        assert_eq!(VoxelHash::build(&[]).get([0, 0, 0]), None);
    }

    #[test]
    fn hash_formula_is_pinned() {
        // The GPU kernel reproduces this function; pin a few values so a change is noticed.
        assert_eq!(hash_key([0, 0, 0]), 0);
        let h = hash_key([1, -2, 3]);
        let a = 0x9E37_79B1u32
            ^ (-2i32 as u32).wrapping_mul(0x85EB_CA77)
            ^ 3u32.wrapping_mul(0xC2B2_AE3D);
        let b = (a ^ (a >> 16)).wrapping_mul(0x7FEB_352D);
        assert_eq!(h, b ^ (b >> 15));
    }
}
