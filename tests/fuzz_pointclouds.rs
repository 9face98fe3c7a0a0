//! Hostile point-cloud files (issue 12): the crafted headers of the issue, through the library and
//! the command line, and a seeded fuzz run over PCD (ascii, binary, binary_compressed) and PLY
//! (ascii, binary little and big endian) written from the real clouds in `$PTXFLOW_DATA_DIR`.
//! Every case must give an error that names the file or a correct cloud, never a panic, with a
//! bounded heap peak (counted by the global allocator below) and bounded time.
//! `PTXFLOW_FUZZ_CASES=100000 cargo test --test fuzz_pointclouds` runs a longer campaign.
//! The crafted cases also hold one file for each defect the fuzzer or review found (see
//! `crafted`).

mod common;
mod fuzz_support;

use fuzz_support::{cases, mutate, mutate_header_number, rng, run_case, CountingAlloc, Worst};
use ptxflow::ndt::io::parse_cloud;
use ptxflow::rng::Rng;
use ptxflow::Error;
use std::path::Path;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// One valid file, the points it must decode to, and what mutations may keep it valid.
struct Seed {
    label: String,
    bytes: Vec<u8>,
    header_end: usize,
    points: Vec<[f32; 3]>,
    /// Binary records of fixed size: changing payload bytes keeps the point count.
    fixed_records: bool,
}

/// Up to `max` points of every real PCD file (a stride through each), or a synthetic cloud when
/// the data folder is missing.
fn source_clouds(max: usize) -> Vec<(String, Vec<[f32; 3]>)> {
    let dir = common::data_dir().join("pointclouds");
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "pcd"))
        {
            let c = ptxflow::ndt::io::read_cloud(&p).expect("real data files parse");
            let step = c.len().div_ceil(max).max(1);
            let pts = c.points.iter().step_by(step).copied().collect();
            out.push((p.file_name().unwrap().to_string_lossy().into_owned(), pts));
        }
    }
    if out.is_empty() {
        eprintln!(
            "fuzz_pointclouds: no clouds in {}, using a synthetic one",
            dir.display()
        );
        let mut r = Rng::new(3);
        let pts = (0..300)
            .map(|_| [r.f32() * 10.0, r.f32() * 10.0 - 5.0, r.f32()])
            .collect();
        out.push(("synthetic".into(), pts));
    }
    out
}

/// LZF compression (greedy, 3-byte hash): literal runs of up to 32 bytes and back references of
/// 3..=264 bytes up to 8192 bytes back, so the fuzzed streams hold both chunk kinds.
fn lzf_compress(inp: &[u8]) -> Vec<u8> {
    fn flush(out: &mut Vec<u8>, lit: &mut Vec<u8>) {
        if !lit.is_empty() {
            out.push((lit.len() - 1) as u8);
            out.append(lit);
        }
    }
    let mut out = Vec::new();
    let mut lit = Vec::new();
    let mut table = vec![usize::MAX; 1 << 14];
    let mut i = 0;
    while i < inp.len() {
        if i + 3 <= inp.len() {
            let h = (u32::from_le_bytes([inp[i], inp[i + 1], inp[i + 2], 0])
                .wrapping_mul(2_654_435_761)
                >> 18) as usize;
            let cand = table[h];
            table[h] = i;
            if cand != usize::MAX && i - cand <= 8192 && inp[cand..cand + 3] == inp[i..i + 3] {
                let mut len = 3;
                while i + len < inp.len() && len < 264 && inp[cand + len] == inp[i + len] {
                    len += 1;
                }
                flush(&mut out, &mut lit);
                let (l, o) = (len - 2, i - cand - 1);
                if l < 7 {
                    out.push((l << 5 | o >> 8) as u8);
                } else {
                    out.push((7 << 5 | o >> 8) as u8);
                    out.push((l - 7) as u8);
                }
                out.push(o as u8);
                i += len;
                continue;
            }
        }
        lit.push(inp[i]);
        if lit.len() == 32 {
            flush(&mut out, &mut lit);
        }
        i += 1;
    }
    flush(&mut out, &mut lit);
    out
}

/// A PCD field: name, SIZE, TYPE, COUNT, and its value(s) for point `i` (as f64).
type PcdField = (&'static str, usize, char, usize);

const PCD_PLAIN: &[PcdField] = &[("x", 4, 'F', 1), ("y", 4, 'F', 1), ("z", 4, 'F', 1)];
const PCD_MIXED: &[PcdField] = &[
    ("intensity", 4, 'F', 2),
    ("x", 8, 'F', 1),
    ("y", 8, 'F', 1),
    ("z", 8, 'F', 1),
    ("ring", 2, 'U', 1),
];

fn pcd_value(f: &PcdField, p: &[f32; 3], i: usize, e: usize) -> f64 {
    match f.0 {
        "x" => p[0] as f64,
        "y" => p[1] as f64,
        "z" => p[2] as f64,
        "ring" => (i % 65_536) as f64,
        _ => 7.0 + e as f64,
    }
}

fn pcd_bytes(f: &PcdField, v: f64) -> Vec<u8> {
    match (f.2, f.1) {
        ('F', 4) => (v as f32).to_le_bytes().to_vec(),
        ('F', _) => v.to_le_bytes().to_vec(),
        _ => (v as u16).to_le_bytes().to_vec(),
    }
}

/// A PCD file of `points` with `fields` in `encoding`; returns the bytes and the header length.
fn write_pcd(points: &[[f32; 3]], fields: &[PcdField], encoding: &str) -> (Vec<u8>, usize) {
    let col = |f: fn(&PcdField) -> String| fields.iter().map(f).collect::<Vec<_>>().join(" ");
    let n = points.len();
    let mut out = format!(
        "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS {}\nSIZE {}\nTYPE {}\n\
         COUNT {}\nWIDTH {n}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA {encoding}\n",
        col(|f| f.0.to_string()),
        col(|f| f.1.to_string()),
        col(|f| f.2.to_string()),
        col(|f| f.3.to_string()),
    )
    .into_bytes();
    let header_end = out.len();
    match encoding {
        "ascii" => {
            for (i, p) in points.iter().enumerate() {
                let mut words = Vec::new();
                for f in fields {
                    for e in 0..f.3 {
                        let v = pcd_value(f, p, i, e);
                        words.push(match f.2 {
                            // Shortest round-trip text of the stored type.
                            'F' if f.1 == 4 => format!("{}", v as f32),
                            _ => format!("{v}"),
                        });
                    }
                }
                out.extend(words.join(" ").bytes());
                out.push(b'\n');
            }
        }
        "binary" => {
            for (i, p) in points.iter().enumerate() {
                for f in fields {
                    for e in 0..f.3 {
                        out.extend(pcd_bytes(f, pcd_value(f, p, i, e)));
                    }
                }
            }
        }
        _ => {
            let mut soa = Vec::new();
            for f in fields {
                for (i, p) in points.iter().enumerate() {
                    for e in 0..f.3 {
                        soa.extend(pcd_bytes(f, pcd_value(f, p, i, e)));
                    }
                }
            }
            let lzf = lzf_compress(&soa);
            out.extend((lzf.len() as u32).to_le_bytes());
            out.extend((soa.len() as u32).to_le_bytes());
            out.extend(lzf);
        }
    }
    (out, header_end)
}

/// A PLY file of `points` in `format`; `with_faces` puts a `face` element (lists) before the
/// vertices and an `intensity` uchar after z.
fn write_ply(points: &[[f32; 3]], format: &str, with_faces: bool) -> (Vec<u8>, usize) {
    let n = points.len();
    let mut h = format!("ply\nformat {format} 1.0\ncomment fuzz seed\n");
    if with_faces {
        h += "element face 2\nproperty list uchar int vertex_indices\n";
    }
    h += &format!("element vertex {n}\nproperty float x\nproperty float y\nproperty float z\n");
    if with_faces {
        h += "property uchar intensity\n";
    }
    h += "end_header\n";
    let mut out = h.into_bytes();
    let header_end = out.len();
    let faces: [&[i32]; 2] = [&[0, 1, 2], &[2, 1, 0, 3]];
    let big = format == "binary_big_endian";
    let f32b = |v: f32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let i32b = |v: i32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    if format == "ascii" {
        let mut text = String::new();
        if with_faces {
            for f in faces {
                let idx: Vec<String> = f.iter().map(|i| i.to_string()).collect();
                text += &format!("{} {}\n", f.len(), idx.join(" "));
            }
        }
        for (i, p) in points.iter().enumerate() {
            text += &format!("{} {} {}", p[0], p[1], p[2]);
            if with_faces {
                text += &format!(" {}", i % 256);
            }
            text += "\n";
        }
        out.extend(text.bytes());
    } else {
        if with_faces {
            for f in faces {
                out.push(f.len() as u8);
                for &i in f {
                    out.extend(i32b(i));
                }
            }
        }
        for (i, p) in points.iter().enumerate() {
            for c in p {
                out.extend(f32b(*c));
            }
            if with_faces {
                out.push(i as u8);
            }
        }
    }
    (out, header_end)
}

fn seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    for (name, pts) in source_clouds(400) {
        for (layout, fields) in [("plain", PCD_PLAIN), ("mixed", PCD_MIXED)] {
            for enc in ["ascii", "binary", "binary_compressed"] {
                let (bytes, header_end) = write_pcd(&pts, fields, enc);
                seeds.push(Seed {
                    label: format!("{name} as pcd {enc} {layout}"),
                    bytes,
                    header_end,
                    points: pts.clone(),
                    fixed_records: enc == "binary",
                });
            }
        }
        for format in ["ascii", "binary_little_endian", "binary_big_endian"] {
            for with_faces in [false, true] {
                let (bytes, header_end) = write_ply(&pts, format, with_faces);
                seeds.push(Seed {
                    label: format!("{name} as ply {format} faces={with_faces}"),
                    bytes,
                    header_end,
                    points: pts.clone(),
                    fixed_records: format != "ascii" && !with_faces,
                });
            }
        }
    }
    seeds
}

/// The checks every case's outcome must pass; `label` says which case.
fn check(label: &str, path: &Path, input: &[u8], r: &ptxflow::Result<ptxflow::ndt::PointCloud>) {
    match r {
        Ok(c) => {
            assert!(
                c.points.iter().flatten().all(|v| v.is_finite()),
                "{label}: non-finite point kept"
            );
            // No encoding yields more points than LZF's 88-fold expansion of the file's bytes.
            assert!(
                c.len() + c.dropped_non_finite <= 88 * input.len() + 1,
                "{label}: {} points from {} bytes",
                c.len() + c.dropped_non_finite,
                input.len()
            );
        }
        Err(Error::Format { path: p, problem }) => {
            assert_eq!(p, path, "{label}: error names another file");
            assert!(!problem.is_empty(), "{label}: empty problem");
        }
        Err(e) => panic!("{label}: expected Error::Format, got {e:?}"),
    }
}

#[test]
fn real_clouds_round_trip_through_every_encoding() {
    for s in seeds() {
        let path = Path::new("seed.file");
        let c = parse_cloud(path, &s.bytes).unwrap_or_else(|e| panic!("{}: {e}", s.label));
        assert_eq!(c.points, s.points, "{}", s.label);
        assert_eq!(c.dropped_non_finite, 0, "{}", s.label);
    }
}

#[test]
fn mutated_point_clouds_fail_cleanly_within_bounds() {
    let seeds = seeds();
    // Parsing is cheap: four cases per unit of PTXFLOW_FUZZ_CASES (6000 by default).
    let n = 4 * cases();
    let mut rng = rng(1);
    let path = Path::new("/fuzz/cloud.bin");
    let (mut ok, mut worst) = (0usize, Worst::default());
    for id in 0..n {
        let seed = &seeds[id % seeds.len()];
        let mut bytes = seed.bytes.clone();
        let kind = rng.below(10);
        match kind {
            0..=2 => {
                mutate_header_number(&mut rng, &mut bytes, seed.header_end);
            }
            3 if seed.fixed_records => {
                // Payload bytes only: records keep their size, so the point count stays.
                for _ in 0..1 + rng.below(8) {
                    let at = seed.header_end
                        + rng.below((bytes.len() - seed.header_end) as u64) as usize;
                    bytes[at] = rng.next_u64() as u8;
                }
            }
            _ => {
                for _ in 0..1 + rng.below(3) {
                    mutate(&mut rng, &mut bytes);
                }
            }
        }
        let label = format!("{} case {id} (mutation {kind})", seed.label);
        let (r, cost) = run_case("parse_cloud", id, &bytes, || parse_cloud(path, &bytes));
        worst.add(cost);
        check(&label, path, &bytes, &r);
        if let Ok(c) = &r {
            ok += 1;
            if kind == 3 && seed.fixed_records {
                assert_eq!(
                    c.len() + c.dropped_non_finite,
                    seed.points.len(),
                    "{label}: payload-only change altered the point count"
                );
            }
            if bytes == seed.bytes {
                assert_eq!(
                    c.points, seed.points,
                    "{label}: unchanged file, other points"
                );
            }
        }
    }
    eprintln!(
        "{n} mutated clouds from {} seeds: {ok} parsed, {} errors; worst case {} KiB peak, {:?}",
        seeds.len(),
        n - ok,
        worst.peak_bytes >> 10,
        worst.time
    );
}

/// The files of issue 12 (headers claiming 10^12 and more points over a few hundred bytes) and
/// one file for each defect found on the way, with words the error message must hold.
fn crafted() -> Vec<(&'static str, Vec<u8>, &'static [&'static str])> {
    let pcd = |n: &str, data: &str, body: &[u8]| {
        let mut v = format!(
            "# .PCD v0.7\nVERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\n\
             WIDTH {n}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA {data}\n"
        )
        .into_bytes();
        v.extend_from_slice(body);
        v
    };
    let ply = |fmt: &str, n: &str, body: &[u8]| {
        let mut v = format!(
            "ply\nformat {fmt} 1.0\nelement vertex {n}\nproperty float x\nproperty float y\n\
             property float z\nend_header\n"
        )
        .into_bytes();
        v.extend_from_slice(body);
        v
    };
    let ascii_rows = b"0.1 0.2 0.3\n1 2 3\n".repeat(20);
    let raw = |s: &str| s.as_bytes().to_vec();
    let mut compressed = 16u32.to_le_bytes().to_vec();
    compressed.extend((4_294_967_292u32).to_le_bytes());
    compressed.extend([0u8; 16]);
    let tera = "1000000000000";
    vec![
        (
            "huge_binary.pcd",
            pcd(tera, "binary", &[0; 1200]),
            &["POINTS 1000000000000", "12000000000000", "1200"],
        ),
        (
            "huge_ascii.pcd",
            pcd(tera, "ascii", &ascii_rows),
            &["POINTS", "1000000000000", "40"],
        ),
        (
            "huge_compressed.pcd",
            pcd(tera, "binary_compressed", &compressed),
            &["uncompressed size", "4294967292", "12000000000000"],
        ),
        (
            "lzf_4g.pcd",
            pcd("357913941", "binary_compressed", &compressed),
            &["uncompressed size 4294967292", "compressed size of 16"],
        ),
        (
            "overflow.pcd",
            pcd("10000000000000000000", "binary", &[0; 64]),
            &["POINTS 10000000000000000000", "overflows"],
        ),
        (
            // Fuzzer: SIZE x COUNT overflowed (panic in xyz_fields).
            "count_overflow.pcd",
            raw(
                "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 4611686018427387904\n\
                 WIDTH 1\nPOINTS 1\nDATA binary\n",
            ),
            &["SIZE 4 × COUNT 4611686018427387904", "`z`", "overflows"],
        ),
        (
            // Review: WIDTH x HEIGHT overflowed when POINTS is absent.
            "width_height.pcd",
            raw(
                "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 4294967296\nHEIGHT 4294967296\n\
                 DATA ascii\n",
            ),
            &["WIDTH 4294967296", "HEIGHT 4294967296", "overflows"],
        ),
        (
            // Review: z with COUNT 0 at the end of the record read past it (panic).
            "count_zero.pcd",
            raw(
                "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 0\nWIDTH 1\nPOINTS 1\n\
                 DATA binary\n\0\0\0\0\0\0\0\0",
            ),
            &["COUNT", "`z`", "0"],
        ),
        (
            // Review: a float list length type could make the byte count overflow.
            "float_list.ply",
            raw("ply\nformat binary_little_endian 1.0\nelement face 1\n\
                 property list double uchar idx\nelement vertex 1\nproperty float x\n\
                 property float y\nproperty float z\nend_header\n"),
            &["list length type `double`"],
        ),
        (
            "huge_ascii.ply",
            ply("ascii", tera, &ascii_rows),
            &["element vertex", "1000000000000", "6000000000000"],
        ),
        (
            "huge_le.ply",
            ply("binary_little_endian", tera, &[0; 1200]),
            &["element vertex", "1000000000000", "12000000000000", "1200"],
        ),
        (
            "huge_be.ply",
            ply("binary_big_endian", tera, &[0; 1200]),
            &["element vertex", "1000000000000", "12000000000000", "1200"],
        ),
    ]
}

#[test]
fn crafted_headers_fail_with_the_field_and_both_numbers() {
    for (id, (name, bytes, words)) in crafted().into_iter().enumerate() {
        let path = Path::new(name);
        let (r, cost) = run_case("crafted", id, &bytes, || parse_cloud(path, &bytes));
        let msg = r.expect_err(name).to_string();
        assert!(msg.starts_with(name), "{name}: {msg}");
        for w in words {
            assert!(msg.contains(w), "{name}: `{w}` missing from: {msg}");
        }
        assert!(
            cost.peak_bytes < 1 << 20,
            "{name}: {} bytes peak",
            cost.peak_bytes
        );
    }
}

#[test]
fn elements_without_properties_are_not_looped_over() {
    // Review: 10^12 iterations of nothing (hours) before the vertices were reached.
    for format in ["ascii", "binary_little_endian"] {
        let mut bytes = format!(
            "ply\nformat {format} 1.0\nelement junk 1000000000000\nelement vertex 1\n\
             property float x\nproperty float y\nproperty float z\nend_header\n"
        )
        .into_bytes();
        if format == "ascii" {
            bytes.extend(b"1 2 3\n");
        } else {
            for v in [1f32, 2.0, 3.0] {
                bytes.extend(v.to_le_bytes());
            }
        }
        let (r, _) = run_case("empty element", 0, &bytes, || {
            parse_cloud(Path::new("empty.ply"), &bytes)
        });
        assert_eq!(r.unwrap().points, vec![[1.0, 2.0, 3.0]], "{format}");
    }
}

#[test]
fn crafted_headers_fail_in_the_cli_as_target_and_source() {
    let Some(good) = common::data_file_or_skip(
        "crafted_headers_fail_in_the_cli_as_target_and_source",
        "pointclouds/bun4.pcd",
    ) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("ptxflow-crafted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes, _) in crafted() {
        let bad = dir.join(name);
        std::fs::write(&bad, &bytes).unwrap();
        for (target, source) in [(&bad, &good), (&good, &bad)] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptxflow"))
                .args(["ndt", "--device", "cpu", "--target"])
                .arg(target)
                .arg("--source")
                .arg(source)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            // `code()` is None when a signal (an abort) ended the process.
            assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
            assert!(stderr.contains(&*bad.to_string_lossy()), "{name}: {stderr}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
