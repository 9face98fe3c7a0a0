//! Whole LZ4 frames through the compress ring at pipeline speed: a [`BatchSource`] stages each
//! batch straight into a pinned slot (a parallel copy from memory, parallel positioned reads of
//! a file, or a plain reader), the frame blocks of each finished batch are laid out with every
//! core while one core hashes the batch's input, and a writer thread writes them. Memory is the
//! ring plus a few batches of output, whatever the input size.

use super::codec::GpuPageCodec;
use super::device_failure;
use super::pipeline::{par_copy, CompressedBatch};
use crate::lz4::frame_input::fill_from;
use crate::lz4::frame_write::lay_out_blocks;
use crate::lz4::xxh32::Xxh32;
use crate::lz4::{check_page_bytes, FrameOptions, FrameStats, PageKind};
use crate::{Error, Result};
use rayon::prelude::*;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex};

/// Where the bytes of a frame come from, one batch at a time.
pub trait BatchSource: Send {
    /// Fills `buf` completely unless the input ends first; returns the bytes written (0: the
    /// input has ended).
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize>;
}

/// Bytes in memory, copied with every core.
pub struct SliceSource<'a>(pub &'a [u8]);

impl BatchSource for SliceSource<'_> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let take = buf.len().min(self.0.len());
        par_copy(&mut buf[..take], &self.0[..take]);
        self.0 = &self.0[take..];
        Ok(take)
    }
}

/// Any reader (one thread).
pub struct ReadSource<R: Read + Send> {
    /// The reader.
    pub reader: R,
    /// Its name in error messages.
    pub name: PathBuf,
}

impl<R: Read + Send> BatchSource for ReadSource<R> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        fill_from(&mut self.reader, buf, &self.name)
    }
}

/// A file read from its current length with positioned reads on every core (the page cache
/// copies in parallel).
pub struct FileSource<'a> {
    file: &'a File,
    path: &'a Path,
    at: u64,
    len: u64,
}

impl<'a> FileSource<'a> {
    /// Reads `file` (named `path` in errors) from offset 0 to its length now.
    pub fn new(file: &'a File, path: &'a Path) -> Result<Self> {
        let len = file
            .metadata()
            .map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?
            .len();
        Ok(FileSource {
            file,
            path,
            at: 0,
            len,
        })
    }

    /// Bytes the file held when opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl BatchSource for FileSource<'_> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        use std::os::unix::fs::FileExt;
        let take = (buf.len() as u64).min(self.len - self.at) as usize;
        let (file, at) = (self.file, self.at);
        buf[..take]
            .par_chunks_mut(1 << 20)
            .enumerate()
            .try_for_each(|(k, piece)| {
                file.read_exact_at(piece, at + (k as u64) * (1 << 20))
                    .map_err(|source| Error::Io {
                        path: self.path.to_path_buf(),
                        source,
                    })
            })?;
        self.at += take as u64;
        Ok(take)
    }
}

/// Lays the frame blocks of `batch` out in `buf` (see [`lay_out_blocks`]).
fn frame_blocks(batch: &CompressedBatch<'_>, block_checksum: bool, buf: &mut Vec<u8>) {
    let blocks: Vec<(&[u8], bool)> = batch
        .entries
        .iter()
        .map(|e| {
            (
                &batch.packed[e.offset..e.offset + e.stored_bytes],
                e.kind == PageKind::Raw,
            )
        })
        .collect();
    lay_out_blocks(&blocks, block_checksum, buf);
}

impl GpuPageCodec {
    /// Compresses everything `source` yields into one LZ4 frame on `out` (named `out_name` in
    /// errors), on the GPU; returns the writer and counters. Fails with [`Error::Input`] for a
    /// bad page size or a declared content size that differs from the input, [`Error::Io`] for
    /// reads and writes, and device errors as they come (the codec then runs on the CPU for its
    /// next call; the frame is incomplete, so callers discard it).
    pub fn compress_frame<W: Write + Send>(
        &mut self,
        source: &mut dyn BatchSource,
        out: W,
        out_name: &Path,
        options: FrameOptions,
    ) -> Result<(W, FrameStats)> {
        self.compress_frame_with_hash(source, out, out_name, options, None)
    }

    /// Like [`GpuPageCodec::compress_frame`], but the content checksum comes from
    /// `content_hash` (called once, after the last batch) instead of being computed from the
    /// batches: e.g. a [`HashJob`] that hashes the same file on its own thread, started before
    /// the device was even opened. The caller vouches that it hashes exactly the bytes
    /// `source` yields.
    pub fn compress_frame_with_hash<W: Write + Send>(
        &mut self,
        source: &mut dyn BatchSource,
        out: W,
        out_name: &Path,
        options: FrameOptions,
        content_hash: Option<&mut dyn FnMut() -> Result<u32>>,
    ) -> Result<(W, FrameStats)> {
        check_page_bytes(options.page_bytes)?;
        let hash_here = content_hash.is_none();
        let header = options.header().to_bytes()?;
        let io_err = |source| Error::Io {
            path: out_name.to_path_buf(),
            source,
        };
        let ring = self.ring(options.page_bytes)?;
        let mut stats = FrameStats {
            output_bytes: header.len() as u64,
            ..FrameStats::default()
        };
        let mut hash = Xxh32::new(0);
        let (to_writer, writer_rx) = mpsc::sync_channel::<Vec<u8>>(2);
        let (recycle, spare) = mpsc::channel::<Vec<u8>>();
        // The sink runs on rayon threads: a Mutex makes the receiver shareable.
        let spare = Mutex::new(spare);
        let (out, result) = std::thread::scope(|s| {
            let writer = s.spawn(move || {
                let mut out = out;
                let mut r = out.write_all(&header);
                for buf in writer_rx {
                    if r.is_ok() {
                        r = out.write_all(&buf);
                    }
                    let _ = recycle.send(buf);
                }
                (out, r)
            });
            let result = ring.compress_stream(
                |buf| source.fill(buf),
                |batch| {
                    let mut buf = spare
                        .lock()
                        .map(|r| r.try_recv().unwrap_or_default())
                        .unwrap_or_default();
                    rayon::join(
                        || {
                            if hash_here {
                                hash.update(batch.input)
                            }
                        },
                        || frame_blocks(batch, options.block_checksum, &mut buf),
                    );
                    stats.input_bytes += batch.input_bytes as u64;
                    stats.output_bytes += buf.len() as u64;
                    stats.pages += batch.entries.len() as u64;
                    stats.raw_pages += batch
                        .entries
                        .iter()
                        .filter(|e| e.kind == PageKind::Raw)
                        .count() as u64;
                    // A send fails only when the writer stopped; its error is reported below.
                    let _ = to_writer.send(buf);
                    Ok(())
                },
            );
            let digest = match (&result, content_hash) {
                (Ok(()), Some(f)) => f(),
                _ => Ok(hash.digest()),
            };
            let result = result.and_then(|()| {
                let tail = [0u32.to_le_bytes(), digest?.to_le_bytes()].concat();
                let _ = to_writer.send(tail);
                Ok(())
            });
            drop(to_writer);
            let (out, w) = writer
                .join()
                .expect("the frame writer thread does not panic");
            (out, result.and(w.map_err(io_err)))
        });
        if let Err(e) = result {
            if device_failure(&e) {
                self.retire(&e);
            }
            return Err(e);
        }
        stats.output_bytes += 8;
        if let Some(declared) = options.content_size {
            if declared != stats.input_bytes {
                return Err(Error::input(format!(
                    "frame declared {declared} bytes of content but {} were read",
                    stats.input_bytes
                )));
            }
        }
        let mut out = out;
        out.flush().map_err(io_err)?;
        Ok((out, stats))
    }
}

/// The content hash of a file computed on its own thread (sequential positioned reads), so it
/// can start before the device is opened and run beside the compression.
pub struct HashJob {
    handle: Option<std::thread::JoinHandle<Result<u32>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl HashJob {
    /// Starts hashing the file at `path`.
    pub fn start(path: &Path) -> Self {
        let path = path.to_path_buf();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let handle = std::thread::spawn(move || {
            let io = |source| Error::Io {
                path: path.clone(),
                source,
            };
            let mut file = File::open(&path).map_err(io)?;
            let mut buf = vec![0u8; 1 << 20];
            let mut hash = Xxh32::new(0);
            loop {
                let n = file.read(&mut buf).map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                })?;
                if n == 0 {
                    return Ok(hash.digest());
                }
                if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    return Err(Error::input("hashing cancelled"));
                }
                hash.update(&buf[..n]);
            }
        });
        HashJob {
            handle: Some(handle),
            stop,
        }
    }

    /// Stops the hashing early (its digest is then an error); dropping a job does the same.
    pub fn cancel(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits for the digest (an error if called twice).
    pub fn digest(&mut self) -> Result<u32> {
        self.handle
            .take()
            .ok_or_else(|| Error::input("HashJob::digest called twice"))?
            .join()
            .unwrap_or_else(|_| Err(Error::input("the hashing thread panicked")))
    }
}

impl Drop for HashJob {
    fn drop(&mut self) {
        self.cancel();
    }
}
