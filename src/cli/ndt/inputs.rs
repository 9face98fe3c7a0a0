//! The clouds of `ptxflow ndt`: the source list (files, or every `.pcd`/`.ply` of a directory),
//! reading and downsampling, and a loader that reads the next chunk of sources on all cores while
//! the current one is aligned.

use ptxflow::ndt::{read_cloud, voxel_grid_filter};
use ptxflow::{Error, Result};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver};
use std::time::Instant;

/// One cloud, read and downsampled.
pub struct Loaded {
    pub path: PathBuf,
    pub points: Vec<[f32; 3]>,
    /// Points in the file (finite ones).
    pub raw: usize,
    pub read_s: f64,
    pub filter_s: f64,
}

/// Reads `path` and applies the voxel-grid filter (`leaf_m` = 0 keeps every point).
pub fn load(path: &Path, leaf_m: f64) -> Result<Loaded> {
    let t = Instant::now();
    let cloud = read_cloud(path)?;
    let read_s = t.elapsed().as_secs_f64();
    let raw = cloud.len();
    let t = Instant::now();
    let points = if leaf_m > 0.0 {
        voxel_grid_filter(&cloud, leaf_m)?.points
    } else {
        cloud.points
    };
    Ok(Loaded {
        path: path.to_path_buf(),
        points,
        raw,
        read_s,
        filter_s: t.elapsed().as_secs_f64(),
    })
}

fn is_cloud_file(p: &Path) -> bool {
    p.is_file()
        && p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("pcd") || e.eq_ignore_ascii_case("ply"))
}

/// Expands `--source` arguments: files as given, directories to their `.pcd` and `.ply` files
/// (not recursive) in name order.
///
/// Errors: [`Error::Input`] for a directory without clouds or an empty list.
pub fn source_list(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for a in args {
        if a.is_dir() {
            let rd = std::fs::read_dir(a)
                .map_err(|e| Error::input(format!("--source {}: {e}", a.display())))?;
            let mut files: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_cloud_file(p))
                .collect();
            if files.is_empty() {
                return Err(Error::input(format!(
                    "--source {}: the directory holds no .pcd or .ply file",
                    a.display()
                )));
            }
            files.sort();
            out.extend(files);
        } else {
            out.push(a.clone());
        }
    }
    if out.is_empty() {
        return Err(Error::input("--source needs at least one cloud"));
    }
    Ok(out)
}

/// Loads `paths` in parallel (in order).
pub fn load_all(paths: &[PathBuf], leaf_m: f64) -> Result<Vec<Loaded>> {
    if paths.len() <= 1 {
        return paths.iter().map(|p| load(p, leaf_m)).collect();
    }
    paths.par_iter().map(|p| load(p, leaf_m)).collect()
}

/// Chunks of loaded sources, the next one read in the background while the caller works.
pub struct Prefetch {
    rx: Option<Receiver<Result<Vec<Loaded>>>>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl Prefetch {
    /// Starts loading `chunks` (each a list of paths) on another thread, one chunk ahead.
    pub fn start(chunks: Vec<Vec<PathBuf>>, leaf_m: f64) -> Prefetch {
        if chunks.is_empty() {
            return Prefetch {
                rx: None,
                worker: None,
            };
        }
        let (tx, rx) = sync_channel(1);
        let worker = std::thread::spawn(move || {
            for c in chunks {
                if tx.send(load_all(&c, leaf_m)).is_err() {
                    return;
                }
            }
        });
        Prefetch {
            rx: Some(rx),
            worker: Some(worker),
        }
    }

    /// The next chunk, `None` after the last.
    pub fn next_chunk(&mut self) -> Option<Result<Vec<Loaded>>> {
        self.rx.as_ref()?.recv().ok()
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        // Dropping the receiver stops the worker after its current chunk.
        self.rx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}
