//! Which builds of the LZ4 kernels an [`Lz4Kernels`](super::Lz4Kernels) loads, and the shape of
//! its decompress grid: the table's kernels by default, run-time builds of
//! [`decompress::Variant`]s (issue 17's experiments) when asked. Every variant gives the same
//! bytes and status codes as the default; they differ only in speed.
//!
//! `PTXFLOW_LZ4_DECOMPRESS`, read by [`Lz4Kernels::new`](super::Lz4Kernels::new): a
//! comma-separated list of `medium` (a second fast path for literal runs of one length byte),
//! `onestep` (the common sequence's copy always one step, overlapping matches go the slow way),
//! `regs=N` (`.maxnreg N`), `grid` (one page per warp: as many blocks as the pages need, so the
//! hardware balances them, instead of one resident wave striding over the pages). Unset or
//! empty: the defaults.

use crate::kernels::lz4::decompress;
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
                _ => match part.strip_prefix("regs=").map(str::parse::<u32>) {
                    Some(Ok(n)) if (24..=255).contains(&n) => v.decompress.max_regs = Some(n),
                    _ => {
                        return Err(Error::Input {
                            what: format!(
                                "PTXFLOW_LZ4_DECOMPRESS: unknown part `{part}` (medium, \
                                 onestep, grid, regs=24..=255)"
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
}
