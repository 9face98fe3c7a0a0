//! Decoding whole LZ4 frames (held in memory) on the GPU: every block becomes one page of the
//! `lz4_decompress` launch, the frame bytes themselves are the packed input. The GPU takes frames
//! whose blocks are independent and at most 64 KiB (what ptxflow writes); anything else (linked
//! blocks, larger blocks, legacy frames, dictionaries, or anything that does not parse cleanly)
//! is left to the CPU decoder, which also words the errors of corrupt input.
//!
//! A block's decoded length is not stored in the frame; the launch gives each block an upper
//! bound (the kernel's bounded mode) of the frame's content size over its block count, rounded
//! up to 1 KiB, which is the page size for ptxflow's frames of more than 64 blocks. A block
//! that needs more fails with an overflow (or in-place margin) status and the caller decodes on
//! the CPU instead.

use super::kernels::Lz4Kernels;
use super::layout::{check_decompress_status, produced_bytes};
use crate::kernels::lz4::status::{self, KIND_BOUNDED, KIND_RAW};
use crate::lz4::frame_header::{is_skippable_magic, FrameHeader, FRAME_MAGIC, UNCOMPRESSED_BIT};
use crate::lz4::xxh32::{xxh32, Xxh32};
use crate::lz4::{MAX_PAGE_BYTES, PAGE_GRANULE_BYTES};
use crate::{Error, Result};

/// Most decoded bytes one input byte of an LZ4 block can give (a match length byte of 255
/// adds 255), rounded up.
const MAX_EXPANSION: usize = 256;

/// One frame's blocks (as `(offset, stored bytes, raw)` into the input) and its checks.
struct Frame {
    blocks: Vec<(usize, usize, bool)>,
    content_size: Option<u64>,
    content_checksum: Option<u32>,
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    data.get(at..at + 4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

/// Parses `data` into frames the GPU can decode; `None` when some part is for the CPU decoder.
fn parse(data: &[u8]) -> Option<Vec<Frame>> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let magic = u32_at(data, at)?;
        at += 4;
        if is_skippable_magic(magic) {
            at = at.checked_add(4 + u32_at(data, at)? as usize)?;
            continue;
        }
        if magic != FRAME_MAGIC {
            return None;
        }
        let len = FrameHeader::descriptor_len(*data.get(at)?);
        let header = FrameHeader::parse(data.get(at..at + len)?).ok()?;
        at += len;
        if !header.block_independent
            || header.block_max_bytes > MAX_PAGE_BYTES
            || header.dict_id.is_some()
        {
            return None;
        }
        let mut blocks = Vec::new();
        loop {
            let word = u32_at(data, at)?;
            at += 4;
            if word == 0 {
                break;
            }
            let size = (word & !UNCOMPRESSED_BIT) as usize;
            if size > header.block_max_bytes {
                return None;
            }
            let block = data.get(at..at + size)?;
            blocks.push((at, size, word & UNCOMPRESSED_BIT != 0));
            at += size;
            if header.block_checksum {
                if u32_at(data, at)? != xxh32(block, 0) {
                    return None;
                }
                at += 4;
            }
        }
        let content_checksum = if header.content_checksum {
            at += 4;
            Some(u32_at(data, at - 4)?)
        } else {
            None
        };
        frames.push(Frame {
            blocks,
            content_size: header.content_size,
            content_checksum,
        });
    }
    (!frames.is_empty()).then_some(frames)
}

/// Output bound per block of a frame (bytes, a multiple of 1 KiB up to 64 KiB).
fn block_bound(f: &Frame) -> usize {
    let n = f.blocks.len().max(1) as u64;
    let guess = f
        .content_size
        .map_or(MAX_PAGE_BYTES as u64, |c| c.div_ceil(n));
    let rounded = guess.div_ceil(PAGE_GRANULE_BYTES as u64) * PAGE_GRANULE_BYTES as u64;
    (rounded as usize).clamp(PAGE_GRANULE_BYTES, MAX_PAGE_BYTES)
}

/// Decodes the frames in `data` on the GPU into `out` and returns `Some((frames, blocks))`;
/// `None` (nothing appended) when they are for the CPU decoder (see the module docs),
/// [`Error::Corrupt`] when a block or a checksum is wrong, driver errors as they come.
pub fn decode_frames_gpu(
    kernels: &Lz4Kernels,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<Option<(usize, usize)>> {
    let Some(frames) = parse(data) else {
        return Ok(None);
    };
    let page_bytes = frames
        .iter()
        .map(block_bound)
        .max()
        .unwrap_or(PAGE_GRANULE_BYTES);
    let n: usize = frames.iter().map(|f| f.blocks.len()).sum();
    // The launch reserves a whole page per block on the device and the host. LZ4 expands at most
    // about 255-fold, so slots beyond that per input byte are not backed by the input (e.g. many
    // one-byte blocks under a huge content size): the CPU decoder, bounded by the block
    // maximum, takes such input.
    let slot_bytes = n.checked_mul(page_bytes);
    if slot_bytes.is_none_or(|b| b > data.len().saturating_mul(MAX_EXPANSION) + MAX_PAGE_BYTES) {
        return Ok(None);
    }
    let mut words = Vec::with_capacity(4 * n);
    for f in &frames {
        for &(offset, stored, raw) in &f.blocks {
            let offset = u32::try_from(offset)
                .map_err(|_| Error::input("LZ4 input above 4 GiB for the GPU decoder"))?;
            let (orig, kind) = if raw {
                (stored, KIND_RAW)
            } else {
                (page_bytes, KIND_BOUNDED)
            };
            if raw && stored > page_bytes {
                return Ok(None);
            }
            words.extend_from_slice(&[offset, stored as u32, orig as u32, kind]);
        }
    }
    let s = kernels.gpu().stream().clone();
    let drv = Error::driver;
    let mut packed = s
        .alloc_zeros::<u8>(data.len().div_ceil(16) * 16 + 16)
        .map_err(drv("cuMemAlloc"))?;
    s.memcpy_htod(data, &mut packed.slice_mut(0..data.len()))
        .map_err(drv("cuMemcpyHtoD (lz4 frames)"))?;
    let entries = s
        .clone_htod(&words)
        .map_err(drv("cuMemcpyHtoD (lz4 entries)"))?;
    let mut output = s
        .alloc_zeros::<u8>((n * page_bytes).max(1))
        .map_err(drv("cuMemAlloc"))?;
    let mut status = s.alloc_zeros::<u32>(n.max(1)).map_err(drv("cuMemAlloc"))?;
    kernels.decompress(
        &s,
        &packed.slice(..),
        &entries.slice(..),
        n,
        page_bytes,
        &mut output.slice_mut(..),
        &mut status.slice_mut(..),
    )?;
    let status_h = s
        .clone_dtoh(&status)
        .map_err(drv("cuMemcpyDtoH (lz4 status)"))?;
    let out_h = s
        .clone_dtoh(&output)
        .map_err(drv("cuMemcpyDtoH (lz4 pages)"))?;
    s.synchronize()
        .map_err(drv("synchronizing lz4 frame decode"))?;
    let over_bound = |w: &u32| {
        matches!(
            w & status::CODE_MASK,
            status::OUTPUT_OVERFLOW | status::MARGIN
        )
    };
    if status_h[..n].iter().any(over_bound) {
        // A block longer than the guessed bound (or a corrupt one): the CPU decides. A block
        // longer than the bound can also first outrun the in-place margin (MARGIN).
        return Ok(None);
    }
    check_decompress_status(&status_h[..n])?;
    let start = out.len();
    let mut k = 0;
    for (fi, f) in frames.iter().enumerate() {
        let frame_start = out.len();
        for _ in &f.blocks {
            let len = produced_bytes(status_h[k]);
            out.extend_from_slice(&out_h[k * page_bytes..k * page_bytes + len]);
            k += 1;
        }
        let frame = &out[frame_start..];
        let bad_size = f.content_size.is_some_and(|c| c != frame.len() as u64);
        let bad_sum = f.content_checksum.is_some_and(|c| {
            let mut h = Xxh32::new(0);
            h.update(frame);
            c != h.digest()
        });
        if bad_size || bad_sum {
            out.truncate(start);
            return Err(Error::Corrupt {
                what: format!(
                    "frame {fi}: content {} does not match its header",
                    if bad_size { "size" } else { "checksum" }
                ),
            });
        }
    }
    Ok(Some((frames.len(), n)))
}
