//! Reading point clouds from PCD and PLY files.
//!
//! The format is chosen by content, not by extension: a file whose first line is `ply` is PLY,
//! anything else is parsed as PCD. The PCD and PLY readers (and LZF for PCD `binary_compressed`)
//! are written here rather than taken from a crate: together they are a few hundred lines, the PCD
//! crates pull in a derive-macro stack for typed records we do not need, and owning the code lets
//! every failure name the file and the exact problem.

pub mod lzf;
pub mod pcd;
mod pcd_header;
pub mod ply;

use crate::ndt::cloud::PointCloud;
use crate::{Error, Result};
use std::path::Path;

/// Reads `path` (PCD in any encoding, or PLY) into a [`PointCloud`] of its finite x/y/z points.
///
/// Errors: [`Error::Io`] when the file cannot be read (missing, permissions);
/// [`Error::Format`] naming the file when it is truncated, malformed or lacks x, y or z.
pub fn read_cloud(path: impl AsRef<Path>) -> Result<PointCloud> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_cloud(path, &bytes)
}

/// Parses a whole PCD or PLY file held in memory; `path` only names it in errors.
pub fn parse_cloud(path: &Path, bytes: &[u8]) -> Result<PointCloud> {
    if bytes.starts_with(b"ply\n") || bytes.starts_with(b"ply\r\n") {
        ply::parse(path, bytes)
    } else {
        pcd::parse(path, bytes)
    }
}
