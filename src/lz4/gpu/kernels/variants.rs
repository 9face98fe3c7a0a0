//! Which builds of the LZ4 kernels an [`Lz4Kernels`](super::Lz4Kernels) loads, and the shape of
//! its decompress grid: the table's kernels by default, run-time builds of
//! [`decompress::Variant`]s (issue 17's experiments) when asked. Every variant gives the same
//! bytes and status codes as the default; they differ only in speed.
//!
//! `PTXFLOW_LZ4_DECOMPRESS`, read by [`Lz4Kernels::new`](super::Lz4Kernels::new): a
//! comma-separated list of `medium` (a second fast path for literal runs of one length byte),
//! `onestep` (the common sequence's copy always one step, overlapping matches go the slow way),
//! `regs=N` (`.maxnreg N`), `halves` (two pages per warp, one per half-warp), `quarters` (four
//! pages per warp, 8 lanes each), `grid` (one page per warp: as many blocks as the pages need, so the
//! hardware balances them, instead of one resident wave striding over the pages). Unset or
//! empty: the defaults.

use super::super::layout::{Geometry, SmLimits};
use crate::kernels::lz4::{decompress, decompress_shared_per_warp};
use crate::{Error, Result};

/// The kernel builds and grid choices of one [`Lz4Kernels`](super::Lz4Kernels).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelVariants {
    /// The `lz4_decompress` build.
    pub decompress: decompress::Variant,
    /// Decompress grids cover every page with one warp (see the module docs).
    pub decompress_full_grid: bool,
}

impl KernelVariants {
    /// Parses a spec as `PTXFLOW_LZ4_DECOMPRESS` takes it.
    pub fn parse_decompress(spec: &str) -> Result<KernelVariants> {
        let mut v = KernelVariants::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "medium" => v.decompress.medium = true,
                "onestep" => v.decompress.one_step = true,
                "grid" => v.decompress_full_grid = true,
                "halves" => v.decompress.halves = true,
                "quarters" => v.decompress.quarters = true,
                _ => match part.strip_prefix("regs=").map(str::parse::<u32>) {
                    Some(Ok(n)) if (24..=255).contains(&n) => v.decompress.max_regs = Some(n),
                    _ => {
                        return Err(Error::Input {
                            what: format!(
                                "PTXFLOW_LZ4_DECOMPRESS: unknown part `{part}` (medium, \
                                 onestep, grid, halves, quarters, regs=24..=255)"
                            ),
                        })
                    }
                },
            }
        }
        Ok(v)
    }

    /// The variants `PTXFLOW_LZ4_DECOMPRESS` asks for (the defaults when it is unset).
    pub fn from_env() -> Result<KernelVariants> {
        match std::env::var("PTXFLOW_LZ4_DECOMPRESS") {
            Ok(spec) => Self::parse_decompress(&spec),
            Err(_) => Ok(KernelVariants::default()),
        }
    }

    /// Launch shape of a decompress launch of these variants over `n_pages` pages whose warps take
    /// `pages_per_warp` pages each (the rule of `layout::decompress_geometry`: the block size that
    /// lets an SM hold the most warps, within 48 KiB of shared memory per block; one resident wave
    /// striding over the pages, or with `decompress_full_grid` one warp per page group).
    pub fn decompress_geometry(
        &self,
        page_bytes: usize,
        n_pages: usize,
        sm_count: u32,
        sm: SmLimits,
    ) -> Geometry {
        const SHARED_RESERVED_PER_BLOCK: u32 = 1 << 10;
        let ppw = self.decompress.pages_per_warp();
        let per_warp = ppw * decompress_shared_per_warp(page_bytes as u32);
        let blocks_per_sm = |wpb: u32| {
            let by_shared = sm.shared_bytes / (wpb * per_warp + SHARED_RESERVED_PER_BLOCK);
            let warp_regs = (sm.regs_per_thread * 32).div_ceil(256) * 256;
            let by_regs = (16384u32)
                .checked_div(warp_regs)
                .map_or(u32::MAX, |q| 4 * q / wpb);
            by_shared.min(by_regs).min(64 / wpb).clamp(1, 32)
        };
        let top = ((48u32 << 10) / per_warp).clamp(1, self.decompress.max_block() / 32);
        let wpb = (1..=top)
            .rev()
            .max_by_key(|&w| (w * blocks_per_sm(w), w))
            .unwrap_or(1);
        let groups = n_pages.div_ceil(ppw as usize).max(1);
        let wanted = groups.div_ceil(wpb as usize);
        let resident = (sm_count.max(1) * blocks_per_sm(wpb)) as usize;
        let blocks = if self.decompress_full_grid {
            wanted
        } else {
            wanted.min(resident)
        };
        Geometry {
            blocks: u32::try_from(blocks).unwrap_or(u32::MAX),
            warps_per_block: wpb,
            shared_bytes: wpb * per_warp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        let v = KernelVariants::parse_decompress("medium, onestep,regs=40,grid").unwrap();
        assert!(v.decompress.medium && v.decompress.one_step && v.decompress_full_grid);
        assert_eq!(v.decompress.max_regs, Some(40));
        assert_eq!(
            KernelVariants::parse_decompress("").unwrap(),
            KernelVariants::default()
        );
        assert!(KernelVariants::parse_decompress("fast").is_err());
        assert!(KernelVariants::parse_decompress("regs=8").is_err());
    }

    #[test]
    fn geometry_follows_the_layout_rule() {
        let one_step = KernelVariants::parse_decompress("onestep").unwrap();
        let halves = KernelVariants::parse_decompress("halves").unwrap();
        let full = KernelVariants::parse_decompress("halves,grid").unwrap();
        for (shared_bytes, regs_per_thread) in [(233_472, 47), (233_472, 40), (101_376, 64)] {
            let sm = SmLimits {
                shared_bytes,
                regs_per_thread,
            };
            for (pb, n) in [(4096, 65_536), (1024, 7), (65_536, 300)] {
                let want = crate::lz4::gpu::layout::decompress_geometry(pb, n, 132, sm);
                assert_eq!(one_step.decompress_geometry(pb, n, 132, sm), want);
                let h = halves.decompress_geometry(pb, n, 132, sm);
                let per_page = decompress_shared_per_warp(pb as u32);
                assert_eq!(h.shared_bytes, h.warps_per_block * 2 * per_page);
                assert!(h.shared_bytes <= 48 << 10 || h.warps_per_block == 1);
                let f = full.decompress_geometry(pb, n, 132, sm);
                assert!(f.warps() as usize * 2 >= n);
            }
        }
    }
}
