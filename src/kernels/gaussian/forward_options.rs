//! Build options of `gaussian_forward_fast_f32` (`super::forward_fast`) and the variant names
//! that select them (`PTXFLOW_GAUSS_FAST`).

use super::forward::{BLOCK, CHUNK_ALIGN};
use super::forward_fast::{FAST_STRIDE, POINTS_PER_THREAD};

/// Warps per block.
const WARPS: u32 = BLOCK / 32;

/// Build options (the built-in kernel uses the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Points each thread owns.
    pub points_per_thread: u32,
    /// `.maxnreg`, or none.
    pub max_registers: Option<u32>,
    /// Gaussians per pass of the expanded loop (divides [`CHUNK_ALIGN`]).
    pub unroll: u32,
    /// Gaussians staged per tile, in blocks of [`BLOCK`] (1 when 0): fewer barriers per pair.
    pub tile_blocks: u32,
    /// Stage the subtract form's constants only in a flagged tile (into the records' shared
    /// array, after the flag test) instead of in every tile beside the records.
    pub lazy: bool,
    /// Load with the largest shared-memory carveout (a load option; the PTX is the same).
    pub carveout: bool,
    /// The chunk rows' sum in the kernel: two more parameters (`values`, `counters`); with
    /// several chunks the last block of each point block to finish adds the rows (see
    /// `forward_finish`).
    pub fused: bool,
    /// Shared records of [`super::forward_fast::PACKED_STRIDE`] scalars (two in five vector loads; `unroll` even).
    pub packed: bool,
    /// The grid's last, partial point block runs only the points per thread that hold a point
    /// below num_points (one pair loop per count).
    pub partial: bool,
    /// Chunks of different lengths from a table (one more parameter, `starts`: chunk c is
    /// Gaussians `starts[c]..starts[c + 1]`), shortening towards the end of the grid so that the
    /// last wave of blocks ends together; the host's schedule (`crate::gaussian::gpu::fast`).
    pub schedule: Option<Schedule>,
}

/// The host's chunk schedule for [`Options::schedule`] (guided: a chunk takes the remaining
/// Gaussians times point blocks / (slots `guide` / 100), rounded down to [`CHUNK_ALIGN`] and
/// clamped to `min..=max`, `max` raised to the uniform plan's chunk where that is longer). The
/// default (75, 768, 64; H100, 10000 x 100000, lazy staging and fused sum, alternating runs,
/// gpu-results/s12/gfw-2.log): 489.1-493.8 us against 490.5-495.2 for guide 100, 495.1-495.6
/// for (100, 1024, 128) and (150, 768, 128), 498.7 for 200, and 494.9-498.1 with equal chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Percent: larger means shorter chunks.
    pub guide: u32,
    /// Longest chunk (a multiple of [`CHUNK_ALIGN`]).
    pub max: u32,
    /// Shortest chunk (a multiple of [`CHUNK_ALIGN`]).
    pub min: u32,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            guide: 75,
            max: 768,
            min: 64,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            points_per_thread: POINTS_PER_THREAD,
            max_registers: None,
            unroll: 4,
            tile_blocks: 1,
            lazy: true,
            carveout: false,
            fused: true,
            packed: false,
            partial: false,
            schedule: Some(Schedule::default()),
        }
    }
}

/// The options [`super::forward_fast::variant`] builds for `name`.
pub fn variant_options(name: &str) -> Option<Options> {
    let mut o = Options::default();
    for part in name.split('-') {
        let (key, val) = part.split_at(1.min(part.len()));
        let v: u32 = val.parse().ok()?;
        match key {
            "p" if (1..=16).contains(&v) => o.points_per_thread = v,
            "r" => o.max_registers = Some(v),
            "u" if v > 0 && CHUNK_ALIGN.is_multiple_of(v) => o.unroll = v,
            "t" if (1..=6).contains(&v) => o.tile_blocks = v,
            "l" if v <= 1 => o.lazy = v == 1,
            "c" if v <= 1 => o.carveout = v == 1,
            "f" if v <= 1 => o.fused = v == 1,
            "k" if v <= 1 => o.packed = v == 1,
            "v" if v <= 1 => o.partial = v == 1,
            "g" if v == 0 => o.schedule = None,
            "g" => o.schedule.get_or_insert_with(Schedule::default).guide = v,
            "m" | "n" if v >= CHUNK_ALIGN && v.is_multiple_of(CHUNK_ALIGN) => {
                let s = o.schedule.get_or_insert_with(Schedule::default);
                if key == "m" {
                    s.max = v
                } else {
                    s.min = v
                }
            }
            _ => return None,
        }
    }
    // Static shared memory stays within 48 KiB: two arrays of 6 KiB per BLOCK Gaussians, one
    // when lazy.
    (o.lazy || o.tile_blocks <= 3)
        .then_some(o)
        .filter(|o| !o.packed || o.unroll.is_multiple_of(2))
        .filter(|o| o.schedule.is_none_or(|s| s.min <= s.max))
}

impl Options {
    /// Static shared memory of the kernel these options build, in bytes.
    pub fn shared_bytes(&self) -> u32 {
        let tile = BLOCK * self.tile_blocks.max(1) * FAST_STRIDE * 4;
        tile * if self.lazy { 1 } else { 2 } + 4 * WARPS
    }
}
