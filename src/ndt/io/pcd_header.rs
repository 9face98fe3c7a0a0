//! The PCD header: keyword lines up to `DATA`, checked for consistency (sizes, types, counts)
//! and for overflow of every product it implies; the reader in `pcd.rs` checks the payload.

/// One `FIELDS` entry with its size, type letter and element count.
#[derive(Clone, Debug)]
pub(super) struct Field {
    pub(super) name: String,
    pub(super) size: usize,
    pub(super) kind: u8,
    pub(super) count: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Encoding {
    Ascii,
    Binary,
    BinaryCompressed,
}

/// The parsed header and where the payload starts in the file's bytes.
pub(super) struct Header {
    pub(super) fields: Vec<Field>,
    pub(super) points: usize,
    pub(super) encoding: Encoding,
    pub(super) data_start: usize,
}

pub(super) fn parse_header(bytes: &[u8]) -> Result<Header, String> {
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
                    (None, Some(w), Some(h)) => w.checked_mul(h).ok_or_else(|| {
                        format!("header WIDTH {w} × HEIGHT {h} overflows a point count")
                    })?,
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
pub(super) struct Xyz {
    pub(super) field: [usize; 3],
    pub(super) offset: [usize; 3],
    pub(super) point_step: usize,
}

pub(super) fn xyz_fields(fields: &[Field]) -> Result<Xyz, String> {
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
        if fields[i].count == 0 {
            return Err(format!("header COUNT of field `{axis}` is 0"));
        }
        xyz.field[k] = i;
        xyz.offset[k] = record_bytes(&fields[..i])?;
    }
    xyz.point_step = record_bytes(fields)?;
    Ok(xyz)
}

/// `Σ SIZE·COUNT` over `fields` (bytes), or an error when the header's COUNTs overflow it.
fn record_bytes(fields: &[Field]) -> Result<usize, String> {
    fields.iter().try_fold(0usize, |sum, f| {
        f.size
            .checked_mul(f.count)
            .and_then(|b| sum.checked_add(b))
            .ok_or_else(|| {
                format!(
                    "header SIZE {} × COUNT {} of field `{}` overflows a record size",
                    f.size, f.count, f.name
                )
            })
    })
}

fn names(fields: &[Field]) -> String {
    fields
        .iter()
        .map(|f| f.name.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}
