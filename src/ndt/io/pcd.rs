//! PCD reader (PCL's Point Cloud Data format, header versions .5 and 0.7), all three encodings.
//!
//! The header is text lines `KEYWORD values...` up to and including the `DATA` line:
//! `FIELDS` names, `SIZE` bytes per element, `TYPE` `F` (float) / `I` (signed) / `U` (unsigned),
//! `COUNT` elements per field (default 1), `WIDTH`, `HEIGHT`, `POINTS` (default WIDTH·HEIGHT).
//! The payload after `DATA`:
//! - `ascii`: one point per line, the elements of all fields separated by white space;
//! - `binary`: little-endian records of `Σ SIZE·COUNT` bytes, point-major ("AoS");
//! - `binary_compressed`: `u32` compressed size, `u32` uncompressed size, then one LZF stream that
//!   decompresses to the same bytes in field-major order ("SoA"): all points' first field, then
//!   all points' second field, and so on.
//!
//! Only `x`, `y`, `z` are kept (first element, converted to `f32`); other fields are skipped.

use super::lzf;
use super::pcd_header::{parse_header, xyz_fields, Encoding, Header, Xyz};
use crate::ndt::cloud::PointCloud;
use crate::{Error, Result};
use std::path::Path;

/// Parses PCD `bytes` (the whole file) read from `path` (used in error messages).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<PointCloud> {
    let fail = |problem: String| Error::Format {
        path: path.to_path_buf(),
        problem,
    };
    let header = parse_header(bytes).map_err(fail)?;
    let xyz = xyz_fields(&header.fields).map_err(fail)?;
    let payload = &bytes[header.data_start..];
    // POINTS is only a claim: each encoding checks it against the payload before reserving for it,
    // so the reservation here is what the smallest possible point record could fill.
    let mut cloud = PointCloud {
        points: Vec::with_capacity(header.points.min(max_points(&header, xyz, payload.len()))),
        dropped_non_finite: 0,
    };
    match header.encoding {
        Encoding::Ascii => read_ascii(&header, xyz, payload, &mut cloud),
        Encoding::Binary => read_binary(&header, xyz, payload, &mut cloud),
        Encoding::BinaryCompressed => read_compressed(&header, xyz, payload, &mut cloud),
    }
    .map_err(fail)?;
    Ok(cloud)
}

/// The most points `payload_len` bytes can hold in this encoding: an upper bound for reserving.
fn max_points(h: &Header, xyz: Xyz, payload_len: usize) -> usize {
    match h.encoding {
        // A value is at least one character and one separator.
        Encoding::Ascii => payload_len / (2 * tokens_per_point(h)).max(1) + 1,
        Encoding::Binary => payload_len / xyz.point_step,
        // LZF expands at most MAX_EXPANSION-fold.
        Encoding::BinaryCompressed => {
            payload_len.saturating_mul(lzf::MAX_EXPANSION) / xyz.point_step
        }
    }
}

/// Elements in one ascii line: the sum of COUNT (saturating: too large to fit any line anyway).
fn tokens_per_point(h: &Header) -> usize {
    h.fields
        .iter()
        .fold(0usize, |sum, f| sum.saturating_add(f.count))
}

/// Decodes one little-endian scalar of `size` bytes and type letter `kind` as f64.
fn scalar(b: &[u8], kind: u8, size: usize) -> f64 {
    // Slices come from bounds-checked record offsets; `size` was validated in the header.
    let a = |n: usize| -> [u8; 8] {
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(&b[..n]);
        v
    };
    match (kind, size) {
        (b'F', 4) => f32::from_le_bytes(b[..4].try_into().expect("4-byte slice")) as f64,
        (b'F', _) => f64::from_le_bytes(a(8)),
        (b'I', 1) => b[0] as i8 as f64,
        (b'I', 2) => i16::from_le_bytes([b[0], b[1]]) as f64,
        (b'I', 4) => i32::from_le_bytes(b[..4].try_into().expect("4-byte slice")) as f64,
        (b'I', _) => i64::from_le_bytes(a(8)) as f64,
        (_, 1) => b[0] as f64,
        (_, 2) => u16::from_le_bytes([b[0], b[1]]) as f64,
        (_, 4) => u32::from_le_bytes(b[..4].try_into().expect("4-byte slice")) as f64,
        _ => u64::from_le_bytes(a(8)) as f64,
    }
}

fn read_ascii(h: &Header, xyz: Xyz, payload: &[u8], cloud: &mut PointCloud) -> Result<(), String> {
    let text = std::str::from_utf8(payload).map_err(|_| "ascii DATA is not text".to_string())?;
    // Element index of x/y/z within a line (COUNT > 1 fields take several tokens).
    let mut token = [0usize; 3];
    #[allow(clippy::needless_range_loop)] // k indexes xyz.field and token together
    for k in 0..3 {
        token[k] = h.fields[..xyz.field[k]]
            .iter()
            .fold(0usize, |sum, f| sum.saturating_add(f.count));
    }
    let tokens_per_point = tokens_per_point(h);
    let mut read = 0usize;
    let mut lines = text.lines().enumerate().peekable();
    while let Some((line_no, line)) = lines.next() {
        if read == h.points {
            break;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        if words.len() < tokens_per_point {
            // A short last line is what a cut-off file looks like.
            let last = lines.peek().is_none();
            return Err(format!(
                "{}ascii point {read} (data line {}) has {} values, fields need {tokens_per_point}",
                if last { "truncated: " } else { "" },
                line_no + 1,
                words.len()
            ));
        }
        let mut p = [0f32; 3];
        for k in 0..3 {
            let w = words[token[k]];
            p[k] = w
                .parse::<f64>()
                .map_err(|_| format!("ascii point {read}: `{w}` is not a number"))?
                as f32;
        }
        cloud.push(p);
        read += 1;
    }
    if read < h.points {
        return Err(format!(
            "truncated: header POINTS declares {} points, ascii DATA holds {read}",
            h.points
        ));
    }
    Ok(())
}

fn read_binary(h: &Header, xyz: Xyz, payload: &[u8], cloud: &mut PointCloud) -> Result<(), String> {
    let need = payload_bytes(h, xyz)?;
    if payload.len() < need {
        return Err(format!(
            "truncated: header POINTS {} × {} bytes a point need {need} bytes of binary DATA, \
             the file holds {}",
            h.points,
            xyz.point_step,
            payload.len()
        ));
    }
    for rec in payload[..need].chunks_exact(xyz.point_step.max(1)) {
        let mut p = [0f32; 3];
        for k in 0..3 {
            let f = &h.fields[xyz.field[k]];
            p[k] = scalar(&rec[xyz.offset[k]..], f.kind, f.size) as f32;
        }
        cloud.push(p);
    }
    Ok(())
}

/// POINTS × the point record (bytes), or an error naming both when the product overflows.
fn payload_bytes(h: &Header, xyz: Xyz) -> Result<usize, String> {
    h.points.checked_mul(xyz.point_step).ok_or_else(|| {
        format!(
            "header POINTS {} × {} bytes a point overflows a byte count",
            h.points, xyz.point_step
        )
    })
}

fn read_compressed(
    h: &Header,
    xyz: Xyz,
    payload: &[u8],
    cloud: &mut PointCloud,
) -> Result<(), String> {
    if payload.len() < 8 {
        return Err("truncated: binary_compressed DATA has no size words".into());
    }
    let compressed = u32::from_le_bytes(payload[0..4].try_into().expect("4 bytes")) as usize;
    let raw = u32::from_le_bytes(payload[4..8].try_into().expect("4 bytes")) as usize;
    let stream = payload.get(8..8 + compressed).ok_or_else(|| {
        format!(
            "truncated: binary_compressed compressed size is {compressed} bytes, the file holds {}",
            payload.len() - 8
        )
    })?;
    let need = payload_bytes(h, xyz)?;
    if raw != need {
        return Err(format!(
            "binary_compressed uncompressed size is {raw} bytes, header POINTS {} × {} bytes a \
             point need {need}",
            h.points, xyz.point_step
        ));
    }
    if raw > compressed.saturating_mul(lzf::MAX_EXPANSION) {
        return Err(format!(
            "binary_compressed uncompressed size {raw} bytes cannot come from a compressed size \
             of {compressed} bytes (LZF expands at most {}-fold)",
            lzf::MAX_EXPANSION
        ));
    }
    let soa = lzf::decompress(stream, raw).map_err(|e| format!("binary_compressed DATA: {e}"))?;
    // Start of each field's block in the field-major layout.
    let block: [usize; 3] = std::array::from_fn(|k| {
        h.fields[..xyz.field[k]]
            .iter()
            .map(|f| f.size * f.count * h.points)
            .sum()
    });
    for i in 0..h.points {
        let mut p = [0f32; 3];
        for k in 0..3 {
            let f = &h.fields[xyz.field[k]];
            let at = block[k] + i * f.size * f.count;
            p[k] = scalar(&soa[at..], f.kind, f.size) as f32;
        }
        cloud.push(p);
    }
    Ok(())
}
