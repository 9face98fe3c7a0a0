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
use crate::ndt::cloud::PointCloud;
use crate::{Error, Result};
use std::path::Path;

/// One `FIELDS` entry with its size, type letter and element count.
#[derive(Clone, Debug)]
struct Field {
    name: String,
    size: usize,
    kind: u8,
    count: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Encoding {
    Ascii,
    Binary,
    BinaryCompressed,
}

/// The parsed header and where the payload starts in the file's bytes.
struct Header {
    fields: Vec<Field>,
    points: usize,
    encoding: Encoding,
    data_start: usize,
}

/// Parses PCD `bytes` (the whole file) read from `path` (used in error messages).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<PointCloud> {
    let fail = |problem: String| Error::Format {
        path: path.to_path_buf(),
        problem,
    };
    let header = parse_header(bytes).map_err(fail)?;
    let xyz = xyz_fields(&header.fields).map_err(fail)?;
    let payload = &bytes[header.data_start..];
    let mut cloud = PointCloud {
        points: Vec::with_capacity(header.points),
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

fn parse_header(bytes: &[u8]) -> Result<Header, String> {
    let mut pos = 0usize;
    let mut names: Option<Vec<String>> = None;
    let mut sizes: Option<Vec<usize>> = None;
    let mut kinds: Option<Vec<u8>> = None;
    let mut counts: Option<Vec<usize>> = None;
    let (mut width, mut height, mut points) = (None, None, None);
    loop {
        if pos >= bytes.len() {
            return Err("not a PCD file: header has no DATA line".into());
        }
        let end = bytes[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |e| pos + e + 1);
        let line = std::str::from_utf8(&bytes[pos..end])
            .map_err(|_| format!("not a PCD file: header line at byte {pos} is not text"))?
            .trim();
        pos = end;
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let key = words.next().unwrap_or_default().to_ascii_uppercase();
        let rest: Vec<&str> = words.collect();
        let ints = |what: &str| -> Result<Vec<usize>, String> {
            rest.iter()
                .map(|w| {
                    w.parse::<usize>()
                        .map_err(|_| format!("header {what}: `{w}` is not a count"))
                })
                .collect()
        };
        let one = |what: &str| -> Result<usize, String> {
            match ints(what)?.as_slice() {
                [v] => Ok(*v),
                _ => Err(format!(
                    "header {what} needs one value, got `{}`",
                    rest.join(" ")
                )),
            }
        };
        match key.as_str() {
            "VERSION" | "VIEWPOINT" => {}
            "FIELDS" | "COLUMNS" => names = Some(rest.iter().map(|s| s.to_string()).collect()),
            "SIZE" => sizes = Some(ints("SIZE")?),
            "COUNT" => counts = Some(ints("COUNT")?),
            "TYPE" => {
                let mut ks = Vec::new();
                for w in &rest {
                    match w.as_bytes() {
                        [k @ (b'F' | b'I' | b'U')] => ks.push(*k),
                        _ => return Err(format!("header TYPE `{w}` is not F, I or U")),
                    }
                }
                kinds = Some(ks);
            }
            "WIDTH" => width = Some(one("WIDTH")?),
            "HEIGHT" => height = Some(one("HEIGHT")?),
            "POINTS" => points = Some(one("POINTS")?),
            "DATA" => {
                let encoding = match rest.first().map(|s| s.to_ascii_lowercase()).as_deref() {
                    Some("ascii") => Encoding::Ascii,
                    Some("binary") => Encoding::Binary,
                    Some("binary_compressed") => Encoding::BinaryCompressed,
                    other => {
                        return Err(format!("unknown DATA encoding `{}`", other.unwrap_or("")))
                    }
                };
                let names = names.ok_or("header has no FIELDS line")?;
                let sizes = sizes.ok_or("header has no SIZE line")?;
                let kinds = kinds.ok_or("header has no TYPE line")?;
                let counts = counts.unwrap_or_else(|| vec![1; names.len()]);
                if sizes.len() != names.len()
                    || kinds.len() != names.len()
                    || counts.len() != names.len()
                {
                    return Err(format!(
                        "header lists {} FIELDS but {} SIZE, {} TYPE and {} COUNT values",
                        names.len(),
                        sizes.len(),
                        kinds.len(),
                        counts.len()
                    ));
                }
                let mut fields = Vec::with_capacity(names.len());
                for (((name, size), kind), count) in
                    names.into_iter().zip(sizes).zip(kinds).zip(counts)
                {
                    let ok = match kind {
                        b'F' => size == 4 || size == 8,
                        _ => matches!(size, 1 | 2 | 4 | 8),
                    };
                    if !ok {
                        return Err(format!(
                            "field `{name}` has unsupported TYPE {} SIZE {size}",
                            kind as char
                        ));
                    }
                    fields.push(Field {
                        name,
                        size,
                        kind,
                        count,
                    });
                }
                let points = match (points, width, height) {
                    (Some(p), _, _) => p,
                    (None, Some(w), Some(h)) => w * h,
                    (None, Some(w), None) => w,
                    _ => return Err("header gives neither POINTS nor WIDTH".into()),
                };
                return Ok(Header {
                    fields,
                    points,
                    encoding,
                    data_start: pos,
                });
            }
            _ => {
                return Err(format!(
                    "unknown header keyword `{key}` (is this a PCD file?)"
                ))
            }
        }
    }
}

/// Byte offsets inside one point record and the field of x, y, z.
#[derive(Clone, Copy)]
struct Xyz {
    field: [usize; 3],
    offset: [usize; 3],
    point_step: usize,
}

fn xyz_fields(fields: &[Field]) -> Result<Xyz, String> {
    let mut xyz = Xyz {
        field: [0; 3],
        offset: [0; 3],
        point_step: 0,
    };
    for (k, axis) in ["x", "y", "z"].iter().enumerate() {
        let i = fields
            .iter()
            .position(|f| f.name == *axis)
            .ok_or_else(|| format!("cloud has no `{axis}` field (FIELDS are {})", names(fields)))?;
        xyz.field[k] = i;
        xyz.offset[k] = fields[..i].iter().map(|f| f.size * f.count).sum();
    }
    xyz.point_step = fields.iter().map(|f| f.size * f.count).sum();
    Ok(xyz)
}

fn names(fields: &[Field]) -> String {
    fields
        .iter()
        .map(|f| f.name.as_str())
        .collect::<Vec<_>>()
        .join(" ")
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
        token[k] = h.fields[..xyz.field[k]].iter().map(|f| f.count).sum();
    }
    let tokens_per_point: usize = h.fields.iter().map(|f| f.count).sum();
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
            "truncated: header declares {} points, ascii DATA holds {read}",
            h.points
        ));
    }
    Ok(())
}

fn read_binary(h: &Header, xyz: Xyz, payload: &[u8], cloud: &mut PointCloud) -> Result<(), String> {
    let need = h.points * xyz.point_step;
    if payload.len() < need {
        return Err(format!(
            "truncated: {} points of {} bytes need {need} bytes of binary DATA, file has {}",
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
    let need = h.points * xyz.point_step;
    if raw != need {
        return Err(format!(
            "binary_compressed declares {raw} uncompressed bytes, {} points of {} bytes need {need}",
            h.points, xyz.point_step
        ));
    }
    let stream = payload.get(8..8 + compressed).ok_or_else(|| {
        format!(
            "truncated: binary_compressed declares {compressed} bytes, file has {}",
            payload.len() - 8
        )
    })?;
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
