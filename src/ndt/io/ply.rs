//! PLY reader (Stanford polygon format): `ascii`, `binary_little_endian` and `binary_big_endian`.
//!
//! The header (`ply`, `format ...`, `element NAME COUNT`, `property TYPE NAME`,
//! `property list COUNT_TYPE ITEM_TYPE NAME`, `comment`/`obj_info`, `end_header`) describes
//! elements stored one after another. Only the `vertex` element's `x`, `y`, `z` are kept (as `f32`);
//! elements stored before it are skipped, those after it are not read.
//! Types: `char`/`int8`, `uchar`/`uint8`, `short`/`int16`, `ushort`/`uint16`, `int`/`int32`,
//! `uint`/`uint32`, `float`/`float32`, `double`/`float64`.

use crate::ndt::cloud::PointCloud;
use crate::{Error, Result};
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Scalar {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    F32,
    F64,
}

impl Scalar {
    fn parse(name: &str) -> Option<Scalar> {
        Some(match name {
            "char" | "int8" => Scalar::I8,
            "uchar" | "uint8" => Scalar::U8,
            "short" | "int16" => Scalar::I16,
            "ushort" | "uint16" => Scalar::U16,
            "int" | "int32" => Scalar::I32,
            "uint" | "uint32" => Scalar::U32,
            "float" | "float32" => Scalar::F32,
            "double" | "float64" => Scalar::F64,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Scalar::I8 | Scalar::U8 => 1,
            Scalar::I16 | Scalar::U16 => 2,
            Scalar::I32 | Scalar::U32 | Scalar::F32 => 4,
            Scalar::F64 => 8,
        }
    }

    /// Decodes `b[..self.size()]` with the given byte order.
    fn decode(self, b: &[u8], big_endian: bool) -> f64 {
        let mut v = [0u8; 8];
        let n = self.size();
        v[..n].copy_from_slice(&b[..n]);
        if big_endian {
            v[..n].reverse();
        }
        match self {
            Scalar::I8 => v[0] as i8 as f64,
            Scalar::U8 => v[0] as f64,
            Scalar::I16 => i16::from_le_bytes([v[0], v[1]]) as f64,
            Scalar::U16 => u16::from_le_bytes([v[0], v[1]]) as f64,
            Scalar::I32 => i32::from_le_bytes([v[0], v[1], v[2], v[3]]) as f64,
            Scalar::U32 => u32::from_le_bytes([v[0], v[1], v[2], v[3]]) as f64,
            Scalar::F32 => f32::from_le_bytes([v[0], v[1], v[2], v[3]]) as f64,
            Scalar::F64 => f64::from_le_bytes(v),
        }
    }
}

#[derive(Clone, Debug)]
enum Property {
    Value { name: String, ty: Scalar },
    List { count: Scalar, item: Scalar },
}

#[derive(Clone, Debug)]
struct Element {
    name: String,
    count: usize,
    properties: Vec<Property>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Format {
    Ascii,
    Binary { big_endian: bool },
}

/// Parses PLY `bytes` (the whole file) read from `path` (used in error messages).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<PointCloud> {
    let fail = |problem: String| Error::Format {
        path: path.to_path_buf(),
        problem,
    };
    let (format, elements, body) = parse_header(bytes).map_err(fail)?;
    read_body(format, &elements, &bytes[body..]).map_err(fail)
}

fn parse_header(bytes: &[u8]) -> Result<(Format, Vec<Element>, usize), String> {
    let mut pos = 0usize;
    let mut format = None;
    let mut elements: Vec<Element> = Vec::new();
    let mut first = true;
    loop {
        if pos >= bytes.len() {
            return Err("PLY header has no end_header line".into());
        }
        let end = bytes[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |e| pos + e + 1);
        let line = std::str::from_utf8(&bytes[pos..end])
            .map_err(|_| format!("PLY header line at byte {pos} is not text"))?
            .trim();
        pos = end;
        let words: Vec<&str> = line.split_whitespace().collect();
        if first {
            if words.as_slice() != ["ply"] {
                return Err("not a PLY file: first line is not `ply`".into());
            }
            first = false;
            continue;
        }
        match words.as_slice() {
            [] | ["comment", ..] | ["obj_info", ..] => {}
            ["format", f, _version] => {
                format = Some(match *f {
                    "ascii" => Format::Ascii,
                    "binary_little_endian" => Format::Binary { big_endian: false },
                    "binary_big_endian" => Format::Binary { big_endian: true },
                    other => return Err(format!("unknown PLY format `{other}`")),
                })
            }
            ["element", name, count] => {
                let count = count
                    .parse()
                    .map_err(|_| format!("element `{name}` count `{count}` is not a number"))?;
                elements.push(Element {
                    name: name.to_string(),
                    count,
                    properties: Vec::new(),
                });
            }
            ["property", "list", count_word, item, _name] => {
                let count = Scalar::parse(count_word)
                    .ok_or_else(|| format!("unknown PLY type `{count_word}`"))?;
                if matches!(count, Scalar::F32 | Scalar::F64) {
                    return Err(format!(
                        "PLY list length type `{count_word}` is not an integer type"
                    ));
                }
                let item =
                    Scalar::parse(item).ok_or_else(|| format!("unknown PLY type `{item}`"))?;
                let e = elements
                    .last_mut()
                    .ok_or("PLY property before any element")?;
                e.properties.push(Property::List { count, item });
            }
            ["property", ty, name] => {
                let ty = Scalar::parse(ty).ok_or_else(|| format!("unknown PLY type `{ty}`"))?;
                let e = elements
                    .last_mut()
                    .ok_or("PLY property before any element")?;
                e.properties.push(Property::Value {
                    name: name.to_string(),
                    ty,
                });
            }
            ["end_header"] => {
                let format = format.ok_or("PLY header has no format line")?;
                return Ok((format, elements, pos));
            }
            _ => return Err(format!("unrecognised PLY header line `{line}`")),
        }
    }
}

/// Index of x, y, z among the vertex element's properties.
fn xyz_of(e: &Element) -> Result<[usize; 3], String> {
    let mut idx = [0usize; 3];
    for (k, axis) in ["x", "y", "z"].iter().enumerate() {
        idx[k] = e
            .properties
            .iter()
            .position(|p| matches!(p, Property::Value { name, .. } if name == axis))
            .ok_or_else(|| format!("PLY vertex element has no `{axis}` property"))?;
    }
    Ok(idx)
}

fn read_body(format: Format, elements: &[Element], body: &[u8]) -> Result<PointCloud, String> {
    let v = elements
        .iter()
        .position(|e| e.name == "vertex")
        .ok_or("PLY file has no `vertex` element")?;
    let xyz = xyz_of(&elements[v])?;
    // Element counts are claims: before anything is reserved or looped over, the body must be
    // able to hold the elements up to the vertices at their smallest (lists empty).
    check_counts(format, &elements[..=v], body.len())?;
    let mut cloud = PointCloud {
        points: Vec::with_capacity(elements[v].count),
        dropped_non_finite: 0,
    };
    match format {
        Format::Ascii => {
            let text =
                std::str::from_utf8(body).map_err(|_| "PLY ascii body is not text".to_string())?;
            let mut tokens = text.split_whitespace();
            let mut next = |what: &str| -> Result<f64, String> {
                let t = tokens
                    .next()
                    .ok_or_else(|| format!("truncated: PLY ascii body ends inside {what}"))?;
                t.parse::<f64>()
                    .map_err(|_| format!("PLY ascii value `{t}` in {what} is not a number"))
            };
            for (ei, e) in elements[..=v].iter().enumerate() {
                if e.properties.is_empty() {
                    continue;
                }
                for n in 0..e.count {
                    let what = format!("{} {n}", e.name);
                    let mut values = [0f64; 3];
                    for (pi, p) in e.properties.iter().enumerate() {
                        match p {
                            Property::Value { .. } => {
                                let x = next(&what)?;
                                if ei == v {
                                    if let Some(k) = xyz.iter().position(|&i| i == pi) {
                                        values[k] = x;
                                    }
                                }
                            }
                            Property::List { .. } => {
                                let len = next(&what)?;
                                for _ in 0..(len.max(0.0) as usize) {
                                    next(&what)?;
                                }
                            }
                        }
                    }
                    if ei == v {
                        cloud.push(values.map(|c| c as f32));
                    }
                }
            }
        }
        Format::Binary { big_endian } => {
            let mut at = 0usize;
            let take =
                |at: &mut usize, n: usize, what: &dyn Fn() -> String| -> Result<usize, String> {
                    let start = *at;
                    if n > body.len() - start {
                        return Err(format!("truncated: PLY binary body ends inside {}", what()));
                    }
                    *at += n;
                    Ok(start)
                };
            for (ei, e) in elements[..=v].iter().enumerate() {
                if e.properties.is_empty() {
                    continue;
                }
                for n in 0..e.count {
                    let what = || format!("{} {n}", e.name);
                    let mut values = [0f64; 3];
                    for (pi, p) in e.properties.iter().enumerate() {
                        match *p {
                            Property::Value { ty, .. } => {
                                let s = take(&mut at, ty.size(), &what)?;
                                if ei == v {
                                    if let Some(k) = xyz.iter().position(|&i| i == pi) {
                                        values[k] = ty.decode(&body[s..], big_endian);
                                    }
                                }
                            }
                            Property::List { count, item } => {
                                let s = take(&mut at, count.size(), &what)?;
                                let len = count.decode(&body[s..], big_endian).max(0.0) as usize;
                                // A u32 length times an 8-byte item fits a 64-bit usize; the
                                // saturation only matters on 32-bit targets, where it is too long.
                                take(&mut at, len.saturating_mul(item.size()), &what)?;
                            }
                        }
                    }
                    if ei == v {
                        cloud.push(values.map(|c| c as f32));
                    }
                }
            }
        }
    }
    Ok(cloud)
}

/// Fails when `elements` (those up to and including the vertices) cannot fit in `body_len` bytes
/// even with every list empty: binary records of their fixed bytes, ascii values of one character
/// and one separator each.
fn check_counts(format: Format, elements: &[Element], body_len: usize) -> Result<(), String> {
    let mut least = 0usize;
    for e in elements {
        let (per, unit) = match format {
            Format::Binary { .. } => (
                e.properties
                    .iter()
                    .map(|p| match p {
                        Property::Value { ty, .. } => ty.size(),
                        Property::List { count, .. } => count.size(),
                    })
                    .sum::<usize>(),
                "bytes",
            ),
            Format::Ascii => (2 * e.properties.len(), "bytes of ascii values"),
        };
        let need = e.count.checked_mul(per).and_then(|b| least.checked_add(b));
        // The last ascii value needs no separator after it.
        let slack = usize::from(format == Format::Ascii);
        match need {
            Some(n) if n <= body_len.saturating_add(slack) => least = n,
            _ => {
                return Err(format!(
                    "truncated: header element {} count {} × at least {per} {unit} each needs {} \
                     bytes, the body holds {body_len}",
                    e.name,
                    e.count,
                    need.map_or_else(|| format!("more than {}", usize::MAX), |n| n.to_string())
                ))
            }
        }
    }
    Ok(())
}
