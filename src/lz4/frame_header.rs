//! The LZ4 frame header (frame format 1.6.x): magic `0x184D2204` (LE), then the frame descriptor
//! FLG, BD, an optional 8-byte content size, an optional 4-byte dictionary id, and HC, the second
//! byte of xxHash32 (seed 0) of the descriptor bytes from FLG on.
//!
//! FLG: bits 7-6 version (01), 5 block independence, 4 block checksum, 3 content size,
//! 2 content checksum, 1 reserved (0), 0 dictionary id. BD: bits 6-4 block maximum size
//! (4: 64 KiB, 5: 256 KiB, 6: 1 MiB, 7: 4 MiB), the other bits reserved (0).
//! After the header come blocks (u32 LE size, high bit set = stored uncompressed; 0 = end mark),
//! each optionally followed by its xxHash32, and after the end mark the optional content xxHash32.

use super::corrupt;
use super::xxh32::xxh32;
use crate::{Error, Result};

/// Magic number of an LZ4 frame.
pub const FRAME_MAGIC: u32 = 0x184D_2204;
/// Magic number of the legacy frame format (`lz4 -l`): 8 MiB independent blocks, no checksums.
pub const LEGACY_MAGIC: u32 = 0x184C_2102;
/// Skippable frames have magic `0x184D2A50..=0x184D2A5F`, then a u32 LE length, then that payload.
pub const SKIPPABLE_MAGIC_BASE: u32 = 0x184D_2A50;
/// Decompressed size of each block of a legacy frame (the last may be shorter).
pub const LEGACY_BLOCK_BYTES: usize = 8 << 20;
/// High bit of a block size: the block is stored uncompressed.
pub const UNCOMPRESSED_BIT: u32 = 0x8000_0000;

/// True for the 16 magic numbers of skippable frames.
pub fn is_skippable_magic(magic: u32) -> bool {
    magic & 0xFFFF_FFF0 == SKIPPABLE_MAGIC_BASE
}

/// The fields of a frame descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Blocks may not reference earlier blocks' output.
    pub block_independent: bool,
    /// Each block is followed by its xxHash32.
    pub block_checksum: bool,
    /// Decompressed size of the whole frame, if declared (bytes).
    pub content_size: Option<u64>,
    /// The frame ends with the xxHash32 of the decompressed content.
    pub content_checksum: bool,
    /// Dictionary the frame was compressed with (unsupported when reading).
    pub dict_id: Option<u32>,
    /// Largest decompressed (and stored) block (bytes): 64 KiB, 256 KiB, 1 MiB or 4 MiB.
    pub block_max_bytes: usize,
}

fn block_max_code(bytes: usize) -> Option<u8> {
    (4..=7u8).find(|&code| block_max_from_code(code) == bytes)
}

fn block_max_from_code(code: u8) -> usize {
    1 << (8 + 2 * code as usize)
}

impl FrameHeader {
    /// Length of the descriptor that follows the magic, HC included, given FLG (bytes).
    pub fn descriptor_len(flg: u8) -> usize {
        3 + if flg & 0x08 != 0 { 8 } else { 0 } + if flg & 0x01 != 0 { 4 } else { 0 }
    }

    /// Magic plus descriptor bytes. Fails with [`Error::Input`] if `block_max_bytes` is not one of
    /// the four sizes the format allows.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let code = block_max_code(self.block_max_bytes).ok_or_else(|| {
            Error::input(format!(
                "LZ4 frame block maximum must be 64 KiB, 256 KiB, 1 MiB or 4 MiB, got {} bytes",
                self.block_max_bytes
            ))
        })?;
        let mut out = FRAME_MAGIC.to_le_bytes().to_vec();
        let flg = 0x40
            | (self.block_independent as u8) << 5
            | (self.block_checksum as u8) << 4
            | (self.content_size.is_some() as u8) << 3
            | (self.content_checksum as u8) << 2
            | self.dict_id.is_some() as u8;
        out.push(flg);
        out.push(code << 4);
        if let Some(size) = self.content_size {
            out.extend_from_slice(&size.to_le_bytes());
        }
        if let Some(id) = self.dict_id {
            out.extend_from_slice(&id.to_le_bytes());
        }
        out.push((xxh32(&out[4..], 0) >> 8) as u8);
        Ok(out)
    }

    /// Parses a descriptor (`descriptor_len(desc[0])` bytes, after the magic) and checks HC and
    /// the reserved bits. Fails with [`Error::Corrupt`] on any mismatch.
    pub fn parse(desc: &[u8]) -> Result<FrameHeader> {
        let flg = *desc
            .first()
            .ok_or_else(|| corrupt("frame descriptor is empty"))?;
        let len = Self::descriptor_len(flg);
        if desc.len() != len {
            return Err(corrupt(format!(
                "frame descriptor has {} bytes, FLG says {len}",
                desc.len()
            )));
        }
        if flg >> 6 != 1 {
            return Err(corrupt(format!(
                "unsupported frame version {} (FLG {flg:#04x})",
                flg >> 6
            )));
        }
        if flg & 0x02 != 0 {
            return Err(corrupt(format!(
                "reserved FLG bit 1 is set (FLG {flg:#04x})"
            )));
        }
        let bd = desc[1];
        if bd & 0x8F != 0 {
            return Err(corrupt(format!("reserved BD bits are set (BD {bd:#04x})")));
        }
        let code = (bd >> 4) & 7;
        if code < 4 {
            return Err(corrupt(format!("invalid block maximum size code {code}")));
        }
        let hc = (xxh32(&desc[..len - 1], 0) >> 8) as u8;
        if hc != desc[len - 1] {
            return Err(corrupt(format!(
                "frame header checksum mismatch: stored {:#04x}, computed {hc:#04x}",
                desc[len - 1]
            )));
        }
        let mut at = 2;
        let content_size = (flg & 0x08 != 0).then(|| {
            at += 8;
            u64::from_le_bytes(
                desc[at - 8..at]
                    .try_into()
                    .expect("8 bytes checked by length"),
            )
        });
        let dict_id = (flg & 0x01 != 0).then(|| {
            at += 4;
            u32::from_le_bytes(
                desc[at - 4..at]
                    .try_into()
                    .expect("4 bytes checked by length"),
            )
        });
        Ok(FrameHeader {
            block_independent: flg & 0x20 != 0,
            block_checksum: flg & 0x10 != 0,
            content_size,
            content_checksum: flg & 0x04 != 0,
            dict_id,
            block_max_bytes: block_max_from_code(code),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_checks_hc() {
        let h = FrameHeader {
            block_independent: true,
            block_checksum: false,
            content_size: Some(12345),
            content_checksum: true,
            dict_id: None,
            block_max_bytes: 65536,
        };
        let bytes = h.to_bytes().unwrap();
        assert_eq!(&bytes[..4], &FRAME_MAGIC.to_le_bytes());
        assert_eq!(bytes[4], 0x6C);
        assert_eq!(bytes[5], 0x40);
        assert_eq!(FrameHeader::parse(&bytes[4..]).unwrap(), h);
        let mut bad = bytes.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(FrameHeader::parse(&bad[4..]).is_err());
    }

    #[test]
    fn lz4_cli_default_header_checksum() {
        // Headers written by `lz4` 1.9.4: FLG 0x64 (independent, content checksum), BD 0x60
        // (1 MiB) and 0x40 (64 KiB).
        let h = FrameHeader::parse(&[0x64, 0x60, 0x85]).unwrap();
        assert_eq!(h.block_max_bytes, 1 << 20);
        assert_eq!(
            FrameHeader::parse(&[0x64, 0x40, 0xA7])
                .unwrap()
                .block_max_bytes,
            65536
        );
        assert!(h.block_independent && h.content_checksum && !h.block_checksum);
    }
}
