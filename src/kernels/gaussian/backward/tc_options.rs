//! The build options of `gaussian_backward_tc_f32` (see the module docs of [`super::tc`]).

use super::lanes::REC;
use super::tc::{ROW, TILE};
use crate::ptx::*;

/// Build options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcOptions {
    /// Points per thread (chunks of 4 points per warp).
    pub k: u32,
    /// Warps per block.
    pub warps: u32,
    /// `.maxnreg`, or none.
    pub max_registers: Option<u32>,
    /// Two Gaussians per thread and `mma.sync.m16n8k4.f64` (sm_90) instead of one Gaussian and
    /// `m8n8k4` (half the mma instructions per pair).
    pub m16: bool,
    /// Grouped: each block takes several groups of points in turn against a chunk of at most
    /// `cap` Gaussians, adding each tile's sums into f64 accumulators in shared memory, and
    /// transforms and stores them once at the end (fewer, longer blocks: fewer per-Gaussian
    /// partial rows, no per-tile transform); 0 = one group per block, each tile transformed and
    /// stored as it ends.
    pub cap: u32,
    /// Two accumulator sets per m-tile (even and odd chunks), added before the store: mma
    /// dependency chains half as long.
    pub split: bool,
}

impl TcOptions {
    /// The lowest target of the build (`m16`: sm_90).
    pub fn target(&self) -> Target {
        if self.m16 {
            Target::Sm90
        } else {
            Target::Sm80
        }
    }
    /// Threads per block.
    pub fn block(&self) -> u32 {
        self.warps * 32
    }
    /// Points per block and group.
    pub fn points_per_block(&self) -> u32 {
        self.warps * 4 * self.k
    }
    /// Bytes of static shared memory (at most 48 KiB).
    pub fn shared_bytes(&self) -> u32 {
        TILE * REC * 4
            + TILE * 16
            + TILE * self.warps * ROW * 8
            + self.cap * 80
            + self.warps * 4
            + 32
    }
}

/// The default build: grouped, 4 points per thread, 4 warps, chunks of 256 Gaussians,
/// `m16n8k4` (H100, 10000 x 100000, GPU runs 3 and 4: backward 2965-2972 us against 3088-3090
/// us for 8 points per thread, 8 warps, one group per block and `m8n8k4`; lanes kernel
/// 1483-1493 us in the same runs). Devices below sm_90 take it with `m8n8k4`
/// (`crate::gaussian::gpu::tc_backward`).
pub const TC_OPTIONS: TcOptions = TcOptions {
    k: 4,
    warps: 4,
    max_registers: None,
    m16: true,
    cap: 256,
    split: false,
};

/// The options of a variant (`PTXFLOW_GAUSS_BWD_TC`): `k<N>` points per thread (1 to 24),
/// `w<N>` warps per block (2 to 16), `r<N>` a register cap, `m16` / `m8` the mma shape (two
/// Gaussians per thread or one), `c<N>` grouped with chunks of at most N Gaussians (a multiple
/// of the tile; `c0` not grouped), `s1` / `s0` two accumulator sets or one, joined by `-`
/// (`k16-w4`, `k6-m16`, `k8-w4-c256`). None for names it does not parse or builds over 48 KiB
/// of shared memory.
pub fn tc_variant_options(name: &str) -> Option<TcOptions> {
    let mut o = TC_OPTIONS;
    for part in name.split('-') {
        let (key, val) = part.split_at(1.min(part.len()));
        let v: u32 = val.parse().ok()?;
        match key {
            "m" if v == 8 || v == 16 => o.m16 = v == 16,
            "k" if (1..=24).contains(&v) => o.k = v,
            "w" if (2..=16).contains(&v) => o.warps = v,
            "r" => o.max_registers = Some(v),
            "c" if v.is_multiple_of(TILE) => o.cap = v,
            "s" if v <= 1 => o.split = v == 1,
            _ => return None,
        }
    }
    (o.shared_bytes() <= 48 * 1024).then_some(o)
}
