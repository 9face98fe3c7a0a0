//! Which builds of the LZ4 kernels an [`Lz4Kernels`](super::Lz4Kernels) loads, and the
//! shape of its grid: the table's `lz4_decompress` (two pages per warp) for pages up to 32 KiB
//! and `lz4_decompress_wide` (one page per warp) above, one warp per page group over the whole
//! grid, by default; run-time builds of other [`decompress::Variant`]s (issue 17's experiments)
//! when asked. Every build gives the same bytes, and fails the same pages, as the others; they
//! differ only in speed.
//!
//! `PTXFLOW_LZ4_DECOMPRESS`, read by [`Lz4Kernels::new`](super::Lz4Kernels::new): unset, empty or
//! `default` for the defaults, else a comma-separated list of switches over the one-warp kernel of
//! session 7 (`warp`: none of them): `medium` (a second fast path for literal runs of one length
//! byte), `onestep` (the common sequence's copy always one step, overlapping matches go the slow
//! way), `regs=N` (`.maxnreg N`), `halves` (two pages per warp, one per half-warp), `quarters`
//! (four pages per warp, 8 lanes each), `grid` (as many blocks as the page groups need, so the
//! hardware balances them, instead of one resident wave striding over the pages). Builds of
//! half- or quarter-warps decode pages above 32 KiB with the table's `lz4_decompress_wide`.
//!
//! Measured (session 8, H200, `benches/lz4_kernels.rs`, dickens tiled to 256 MiB, 4 KiB pages,
//! one process, medians of 21 alternating rounds; two runs): session 7's kernel (`warp`) 170.3 /
//! 170.2 GB/s; `onestep,grid` 225.0 / 224.5 (ncu: issue slots 91% busy); `medium,onestep,grid`
//! 242.9 / 242.1 (8 bytes of local memory); `medium,onestep,regs=56,grid` 243.8; `halves` 222.0,
//! `halves,grid` 237.7 / 236.6, `halves,medium` 246.2 / 245.3, `halves,medium,grid` (the
//! defaults) 261.7 / 260.4; `quarters,medium,grid` 191.0 (13 warps an SM: latency-bound).
//!
//! `PTXFLOW_LZ4_COMPRESS` picks the `lz4_compress` build the same way (see
//! [`KernelVariants::parse_compress`]; every build gives the CPU reference's bytes). Measured
//! (session 9, H100, same bench, medians of 15 (11 for the last five) alternating rounds, three
//! runs): session 8's kernel (`reread`) 59.6 / 59.6 / 59.7 GB/s; `masks` 68.6; `masks,bits,lean`
//! 69.3 / 70.6; `masks,bits,lean,f4e` 70.7 / 70.7; `...,solo,trim` 74.5; `...,solo,trim,probe`
//! 73.1; `...,solo,trim,pipe` (session 9's default) 76.5; `...,solo,trim,probe,pipe` 74.6.
//! Session 10 (H100, medians of 11 alternating rounds, one run): session 9's default 77.0,
//! `...,pipe,tight` 78.9, `...,tight,lanes` 80.3, `...,pipe,lanes` 77.3, `...,tight,medium` 81.0,
//! `...,tight,lanes,medium` (the default) 83.3. Session 11 (H100): `...,medium,wide,packmin` 86.4.
//! Session 12 (H100, medians of 15 alternating rounds, three runs): the default
//! (`...,packmin,direct,keyed,merge,fastloop`) 94.6 against 85.7 for session 11's default and
//! 93.9 without `fastloop`; `...,packmin,direct` 93.0 / 92.2 against 86.4 / 85.7,
//! `...,direct,keyed` 92.7, `...,direct,keyed,merge` 94.0, `...,merge,peers` 92.5.

use super::super::layout::{Geometry, SmLimits};
use crate::kernels::lz4::{compress, decompress, decompress_shared_per_page};
use crate::{Error, Result};

/// The kernel builds and grid choices of one [`Lz4Kernels`](super::Lz4Kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelVariants {
    /// The `lz4_decompress` build.
    pub decompress: decompress::Variant,
    /// Decompress grids cover every page group with one warp (see the module docs).
    pub decompress_full_grid: bool,
    /// The `lz4_compress` build (`PTXFLOW_LZ4_COMPRESS`).
    pub compress: compress::Variant,
}

impl Default for KernelVariants {
    /// The table's builds, over the whole grid.
    fn default() -> Self {
        KernelVariants {
            decompress: decompress::Variant::TABLE,
            decompress_full_grid: true,
            compress: compress::Variant::TABLE,
        }
    }
}

impl KernelVariants {
    /// Parses a spec as `PTXFLOW_LZ4_DECOMPRESS` takes it.
    pub fn parse_decompress(spec: &str) -> Result<KernelVariants> {
        if matches!(spec.trim(), "" | "default") {
            return Ok(KernelVariants::default());
        }
        let mut v = KernelVariants {
            decompress: decompress::Variant::default(),
            decompress_full_grid: false,
            compress: compress::Variant::TABLE,
        };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "warp" => {}
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
                                "PTXFLOW_LZ4_DECOMPRESS: unknown part `{part}` (default, \
                                 warp, medium, onestep, grid, halves, quarters, regs=24..=255)"
                            ),
                        })
                    }
                },
            }
        }
        Ok(v)
    }

    /// Parses a compress spec as `PTXFLOW_LZ4_COMPRESS` takes it: unset, empty or `default` for
    /// the table's build, else comma-separated switches over session 8's kernel (`reread`: none
    /// of them): `masks` (the parse with candidate masks), `bits` (with `masks`: the extension's
    /// bounds as stop bits), `lean` (shorter emission of short sequences), `f4e` (with `masks`: unaligned words by
    /// `prmt.f4e`), `solo` (with `masks`: a peerless window's matches from one ballot), `trim` (with
    /// `masks`: fewer instructions per window), `probe` (with `masks`: `match.any` only where two
    /// lanes share a bucket), `pipe` (with `masks`: the next lookup beside each emission),
    /// `lanes` / `lanes=N` (with `masks,bits,f4e,solo`: a solo window's runs per lane, once,
    /// where it has at least N candidates), `tight` (with `masks,bits,lean`: fewer uniform
    /// instructions per match), `medium` (with `lean`: sequences of 15..=269 literals and a
    /// short match by a path of their own), `wide` (blocks of up to 16 warps beyond 48 KiB of
    /// shared memory), `pairs` (with `solo`: windows of hash collisions by the solo loop),
    /// `packmin` (with `lanes`: fewer operations to unpack a lane's runs), `direct` (with
    /// `lanes,packmin,tight,pipe`: a solo window's match in fewer operations), `keyed` (with
    /// `direct`: lanes grouped by the hash itself, solo windows test the entry in their ballot),
    /// `peers` (with `direct`: windows with shared buckets take their matches the same way),
    /// `merge` (predicated byte loads straight into the register they update), `fastloop` (with
    /// `direct`: a short sequence's match branches on to the next match itself),
    /// experiments only: `small` (a table half the spec's: other bytes) and
    /// `pad=N` (N more shared bytes per warp in the launch),
    /// `regs=N` (`.maxnreg N`).
    pub fn parse_compress(spec: &str) -> Result<compress::Variant> {
        if matches!(spec.trim(), "" | "default") {
            return Ok(compress::Variant::TABLE);
        }
        let mut v = compress::Variant::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "reread" => {}
                "masks" => v.masks = true,
                "bits" => v.bits = true,
                "lean" => v.lean = true,
                "f4e" => v.f4e = true,
                "solo" => v.solo = true,
                "trim" => v.trim = true,
                "probe" => v.probe = true,
                "pipe" => v.pipe = true,
                "lanes" => v.lanes = 1,
                "tight" => v.tight = true,
                "medium" => v.medium = true,
                "wide" => v.wide = true,
                "pairs" => v.pairs = true,
                "packmin" => v.packmin = true,
                "direct" => v.direct = true,
                "keyed" => v.keyed = true,
                "peers" => v.peers = true,
                "merge" => v.merge = true,
                "fastloop" => v.fastloop = true,
                "small" => v.small = true,
                _ if part.starts_with("pad=") => match part["pad=".len()..].parse::<u32>() {
                    Ok(n) if n <= 65536 && n % 16 == 0 => v.pad = n,
                    _ => {
                        return Err(Error::Input {
                            what: format!(
                                "PTXFLOW_LZ4_COMPRESS: `{part}`: pad=0..=65536, a multiple of 16"
                            ),
                        })
                    }
                },
                _ if part.starts_with("lanes=") => match part["lanes=".len()..].parse::<u32>() {
                    Ok(n) if (1..=32).contains(&n) => v.lanes = n,
                    _ => {
                        return Err(Error::Input {
                            what: format!("PTXFLOW_LZ4_COMPRESS: `{part}`: lanes=1..=32"),
                        })
                    }
                },
                _ => match part.strip_prefix("regs=").map(str::parse::<u32>) {
                    Some(Ok(n)) if (24..=255).contains(&n) => v.max_regs = Some(n),
                    _ => {
                        return Err(Error::Input {
                            what: format!(
                                "PTXFLOW_LZ4_COMPRESS: unknown part `{part}` (default, reread, \
                                 masks, bits, lean, f4e, solo, trim, probe, pipe, lanes, lanes=N, tight, medium, wide, pairs, packmin, direct, keyed, peers, merge, fastloop, small, pad=N, regs=24..=255)"
                            ),
                        })
                    }
                },
            }
        }
        Ok(v)
    }

    /// The variants `PTXFLOW_LZ4_DECOMPRESS` and `PTXFLOW_LZ4_COMPRESS` ask for (the defaults
    /// when they are unset).
    pub fn from_env() -> Result<KernelVariants> {
        let mut v = match std::env::var("PTXFLOW_LZ4_DECOMPRESS") {
            Ok(spec) => Self::parse_decompress(&spec)?,
            Err(_) => KernelVariants::default(),
        };
        if let Ok(spec) = std::env::var("PTXFLOW_LZ4_COMPRESS") {
            v.compress = Self::parse_compress(&spec)?;
        }
        Ok(v)
    }

    /// The build that decodes pages of `page_bytes`: half- and quarter-warp builds hand pages
    /// above [`decompress::HALVES_MAX_PAGE`] to [`decompress::Variant::WIDE`].
    pub fn decompress_for(&self, page_bytes: usize) -> decompress::Variant {
        if self.decompress.lanes_per_page() < 32
            && page_bytes > decompress::HALVES_MAX_PAGE as usize
        {
            decompress::Variant::WIDE
        } else {
            self.decompress
        }
    }

    /// Launch shape of a decompress launch of these variants over `n_pages` pages of
    /// `page_bytes` (with the build [`decompress_for`](Self::decompress_for) picks).
    pub fn decompress_geometry(
        &self,
        page_bytes: usize,
        n_pages: usize,
        sm_count: u32,
        sm: SmLimits,
    ) -> Geometry {
        build_geometry(
            self.decompress_for(page_bytes),
            self.decompress_full_grid,
            page_bytes,
            n_pages,
            sm_count,
            sm,
        )
    }
}

/// Launch shape of a launch of the decompress `build` over `n_pages` pages of `page_bytes` (the
/// rule of `layout::decompress_geometry`: the block size that lets an SM hold the most warps,
/// within 48 KiB of shared memory per block; one resident wave striding over the page groups,
/// or with `full_grid` one warp per page group).
pub fn build_geometry(
    build: decompress::Variant,
    full_grid: bool,
    page_bytes: usize,
    n_pages: usize,
    sm_count: u32,
    sm: SmLimits,
) -> Geometry {
    const SHARED_RESERVED_PER_BLOCK: u32 = 1 << 10;
    let ppw = build.pages_per_warp();
    let per_warp = ppw * decompress_shared_per_page(page_bytes as u32);
    let blocks_per_sm = |wpb: u32| {
        let by_shared = sm.shared_bytes / (wpb * per_warp + SHARED_RESERVED_PER_BLOCK);
        let warp_regs = (sm.regs_per_thread * 32).div_ceil(256) * 256;
        let by_regs = (16384u32)
            .checked_div(warp_regs)
            .map_or(u32::MAX, |q| 4 * q / wpb);
        by_shared.min(by_regs).min(64 / wpb).clamp(1, 32)
    };
    let top = ((48u32 << 10) / per_warp).clamp(1, build.max_block() / 32);
    let wpb = (1..=top)
        .rev()
        .max_by_key(|&w| (w * blocks_per_sm(w), w))
        .unwrap_or(1);
    let groups = n_pages.div_ceil(ppw as usize).max(1);
    let wanted = groups.div_ceil(wpb as usize);
    let resident = (sm_count.max(1) * blocks_per_sm(wpb)) as usize;
    let blocks = if full_grid {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        let v = KernelVariants::parse_decompress("medium, onestep,regs=40,grid").unwrap();
        assert!(v.decompress.medium && v.decompress.one_step && v.decompress_full_grid);
        assert_eq!(v.decompress.max_regs, Some(40));
        for spec in ["", "default", " default "] {
            assert_eq!(
                KernelVariants::parse_decompress(spec).unwrap(),
                KernelVariants::default()
            );
        }
        let warp = KernelVariants::parse_decompress("warp").unwrap();
        assert_eq!(warp.decompress, decompress::Variant::default());
        assert!(!warp.decompress_full_grid);
        assert!(KernelVariants::parse_decompress("fast").is_err());
        assert!(KernelVariants::parse_decompress("regs=8").is_err());
    }

    #[test]
    fn parses_compress_specs() {
        for spec in ["", "default", " default "] {
            assert_eq!(
                KernelVariants::parse_compress(spec).unwrap(),
                compress::Variant::TABLE
            );
        }
        let old = KernelVariants::parse_compress("reread").unwrap();
        assert_eq!(old, compress::Variant::default());
        assert!(!old.masks && !old.bits && !old.lean && !old.f4e);
        let v = KernelVariants::parse_compress("masks, bits,lean,f4e,regs=64").unwrap();
        assert!(v.masks && v.bits && v.lean && v.f4e);
        assert_eq!(v.max_regs, Some(64));
        assert!(KernelVariants::parse_compress("fast").is_err());
        assert!(KernelVariants::parse_compress("regs=8").is_err());
        let w = KernelVariants::parse_compress("masks,wide,small,pad=1024").unwrap();
        assert!(w.masks && w.wide && w.small && w.pad == 1024);
        assert!(KernelVariants::parse_compress("pad=10").is_err());
    }

    #[test]
    fn wide_compress_blocks_hold_one_more_warp_of_4k_pages() {
        use crate::lz4::gpu::layout::{compress_geometry_for, SmLimits};
        let sm = SmLimits {
            shared_bytes: 233_472,
            regs_per_thread: 71,
        };
        let n = 1 << 16;
        let table = compress::Variant {
            wide: false,
            ..compress::Variant::TABLE
        };
        let g = compress_geometry_for(table, 4096, n, 132, sm);
        assert_eq!((g.warps_per_block, g.blocks), (3, 9 * 132));
        let wide = compress::Variant {
            wide: true,
            ..table
        };
        let g = compress_geometry_for(wide, 4096, n, 132, sm);
        assert_eq!((g.warps_per_block, g.blocks), (14, 2 * 132));
        assert_eq!(g.shared_bytes, 14 * 8208);
        // A launch that does not fill the device keeps the narrow blocks.
        let g = compress_geometry_for(wide, 4096, 2000, 132, sm);
        assert_eq!(g, compress_geometry_for(table, 4096, 2000, 132, sm));
        let padded = compress::Variant { pad: 1024, ..table };
        assert_eq!(
            compress_geometry_for(padded, 4096, n, 132, sm).warps(),
            8 * 3 * 132
        );
    }

    #[test]
    fn geometry_follows_the_layout_rule() {
        let table = KernelVariants {
            decompress_full_grid: false,
            ..KernelVariants::default()
        };
        let halves = KernelVariants::parse_decompress("halves").unwrap();
        let full = KernelVariants::parse_decompress("halves,grid").unwrap();
        for (shared_bytes, regs_per_thread) in [(233_472, 47), (233_472, 40), (101_376, 64)] {
            let sm = SmLimits {
                shared_bytes,
                regs_per_thread,
            };
            for (pb, n) in [(4096, 65_536), (1024, 7), (32768, 300), (65_536, 300)] {
                // The layout's rule is the table build's (its striding grid).
                if pb <= decompress::HALVES_MAX_PAGE as usize {
                    let want = crate::lz4::gpu::layout::decompress_geometry(pb, n, 132, sm);
                    let got = table.decompress_geometry(pb, n, 132, sm);
                    assert_eq!(
                        (got.warps_per_block, got.shared_bytes),
                        (want.warps_per_block, want.shared_bytes)
                    );
                }
                let h = halves.decompress_geometry(pb, n, 132, sm);
                let build = halves.decompress_for(pb);
                let per_page = decompress_shared_per_page(pb as u32);
                assert_eq!(
                    h.shared_bytes,
                    h.warps_per_block * build.pages_per_warp() * per_page
                );
                assert!(h.shared_bytes <= 48 << 10 || h.warps_per_block == 1);
                let f = full.decompress_geometry(pb, n, 132, sm);
                assert!(f.warps() as usize * build.pages_per_warp() as usize >= n);
            }
        }
    }
}
