//! [`GpuFrameDecoder`]: LZ4 frames decoded on the GPU behind [`std::io::Read`]. A worker thread
//! owns the codec and the reader and runs the streaming decoder
//! ([`GpuPageCodec::decode_frames_stream`]); decoded batches come back through a bounded channel,
//! so memory stays at a few batches. Input the device cannot take (see
//! [`frame_stream`](super::frame_stream)), or no device at all, is decoded on the CPU
//! ([`FrameDecoder`]) instead; [`GpuFrameDecoder::path`] says which ran once reading has begun.

use super::frame_stream::FrameStreamError;
use super::GpuPageCodec;
use crate::lz4::{CodecPath, FrameDecoder};
use crate::Error;
use std::io::{Cursor, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

/// What the worker sends: decoded bytes, or the end of the input (with the path that ran).
enum Msg {
    Bytes(Vec<u8>),
    Done(CodecPath),
    Failed(Error),
}

/// An `io::Read` of the decoded content of LZ4 frames, decoded on the GPU when it can be.
pub struct GpuFrameDecoder {
    rx: mpsc::Receiver<Msg>,
    worker: Option<JoinHandle<()>>,
    current: Cursor<Vec<u8>>,
    path: Option<CodecPath>,
    done: bool,
}

impl GpuFrameDecoder {
    /// Starts decoding `input` with `codec` on a worker thread (use
    /// [`GpuPageCodec::open_or_cpu`] for a codec that falls back to the CPU). Until the first
    /// bytes are decoded, what was read is kept, so that if the device refuses the input the CPU
    /// decoder starts over from its first byte. An input that mixes frames the device takes
    /// with ones it refuses, after some were decoded, is an error.
    pub fn new<R: Read + Send + 'static>(mut codec: GpuPageCodec, input: R) -> Self {
        let (tx, rx) = mpsc::sync_channel::<Msg>(2);
        let worker = std::thread::spawn(move || {
            let emitted = Arc::new(AtomicBool::new(false));
            let mut recorder = Recorder {
                inner: input,
                seen: Vec::new(),
                emitted: emitted.clone(),
            };
            let mut emit = |bytes: &[u8]| {
                emitted.store(true, Ordering::Relaxed);
                tx.send(Msg::Bytes(bytes.to_vec()))
                    .map_err(|_| Error::input("GpuFrameDecoder dropped"))
            };
            let gpu = codec.decode_frames_stream(&mut recorder, Path::new("<reader>"), &mut emit);
            let msg = match gpu {
                Ok(_) => Msg::Done(CodecPath::Gpu),
                Err(FrameStreamError::Failed(e)) => Msg::Failed(e),
                Err(FrameStreamError::Unsuitable(why)) if emitted.load(Ordering::Relaxed) => {
                    // Earlier frames went out already: starting over would repeat them.
                    Msg::Failed(Error::input(format!(
                        "the input mixes frames the GPU decodes with {why}; use FrameDecoder"
                    )))
                }
                Err(FrameStreamError::Unsuitable(_)) => {
                    // Nothing went out: the CPU decoder starts over from the first byte.
                    let Recorder { inner, seen, .. } = recorder;
                    let mut cpu = FrameDecoder::new(Cursor::new(seen).chain(inner));
                    loop {
                        match cpu.next_batch() {
                            Ok(Some(b)) => {
                                if tx.send(Msg::Bytes(b.to_vec())).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => break Msg::Done(CodecPath::Cpu),
                            Err(e) => break Msg::Failed(e),
                        }
                    }
                }
            };
            let _ = tx.send(msg);
        });
        GpuFrameDecoder {
            rx,
            worker: Some(worker),
            current: Cursor::new(Vec::new()),
            path: None,
            done: false,
        }
    }

    /// The path that decoded the input, once it has been read to the end.
    pub fn path(&self) -> Option<CodecPath> {
        self.path
    }
}

/// Records what the GPU parser reads until the first bytes are handed on, so the CPU decoder
/// can start over from the beginning if the device refuses the input before that.
struct Recorder<R> {
    inner: R,
    seen: Vec<u8>,
    emitted: Arc<AtomicBool>,
}

impl<R: Read> Read for Recorder<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.emitted.load(Ordering::Relaxed) {
            self.seen = Vec::new();
        } else {
            self.seen.extend_from_slice(&buf[..n]);
        }
        Ok(n)
    }
}

impl Read for GpuFrameDecoder {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.current.read(buf)?;
            if n > 0 || buf.is_empty() || self.done {
                return Ok(n);
            }
            match self.rx.recv() {
                Ok(Msg::Bytes(b)) => self.current = Cursor::new(b),
                Ok(Msg::Done(p)) => {
                    self.path = Some(p);
                    self.done = true;
                }
                Ok(Msg::Failed(e)) => {
                    self.done = true;
                    return Err(std::io::Error::other(e));
                }
                Err(_) => {
                    self.done = true;
                    return Err(std::io::Error::other("the GPU decoder thread stopped"));
                }
            }
        }
    }
}

impl Drop for GpuFrameDecoder {
    fn drop(&mut self) {
        // Unblock the worker (its sends fail once the receiver is gone), then join it.
        let (_, rx) = mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.rx, rx));
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}
