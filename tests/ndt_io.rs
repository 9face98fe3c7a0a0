//! Point-cloud reading: the three PCD encodings on the real files, PLY written here, NaN handling
//! and error messages.

mod ndt_support;

use ndt_support::*;
use ptxflow::ndt::io::parse_cloud;
use ptxflow::ndt::read_cloud;
use ptxflow::Error;
use std::path::Path;

fn sums(points: &[[f32; 3]]) -> [f64; 3] {
    let mut s = [0f64; 3];
    for p in points {
        for k in 0..3 {
            s[k] += p[k] as f64;
        }
    }
    s
}

#[test]
fn reads_ascii_pcd_of_both_header_versions() {
    let Some(dir) = pointclouds_dir() else { return };
    let b4 = cloud(&dir, "bun4.pcd"); // VERSION .5, no VIEWPOINT
    assert_eq!(b4.len(), 361);
    assert_eq!(b4.points[0], [0.053026, 0.11349, 0.077131]);
    let b0 = cloud(&dir, "bun0.pcd"); // 7 fields, x y z first
    assert_eq!(b0.len(), 397);
    // The file's decimal text, as written; f32 parsing rounds it.
    #[allow(clippy::excessive_precision)]
    let first = [0.0054215998, 0.11349, 0.040748999];
    assert_eq!(b0.points[0], first);
}

#[test]
fn reads_binary_pcd_with_extra_field() {
    let Some(dir) = pointclouds_dir() else { return };
    let c = cloud(&dir, "251370668.pcd");
    assert_eq!(c.len() + c.dropped_non_finite, 69088);
    // Independent decode of the first record straight from the bytes (x y z intensity, f32 LE).
    let bytes = std::fs::read(dir.join("251370668.pcd")).unwrap();
    let start = bytes
        .windows(12)
        .position(|w| w == b"DATA binary\n")
        .unwrap()
        + 12;
    let f =
        |k: usize| f32::from_le_bytes(bytes[start + 4 * k..start + 4 * k + 4].try_into().unwrap());
    assert_eq!(c.points[0], [f(0), f(1), f(2)]);
    let g = |i: usize, k: usize| {
        f32::from_le_bytes(bytes[start + 16 * i + 4 * k..][..4].try_into().unwrap())
    };
    assert_eq!(
        c.points[c.len() - 1],
        [g(69087, 0), g(69087, 1), g(69087, 2)]
    );
}

#[test]
fn reads_binary_compressed_pcd_like_liblzf() {
    let Some(dir) = pointclouds_dir() else { return };
    // Reference values from liblzf (python-lzf 0.2.6 decompress) and a field-major decode in Python.
    let cases = [
        (
            "room_scan1.pcd",
            112586,
            [0.10718189924955368, 0.0529458187520504, 1.6857659816741943],
            [
                0.0016759870341047645,
                0.0008218492730520666,
                -0.10998419672250748,
            ],
            [26047.641804889077, 15075.899807551286, 46427.95474377833],
        ),
        (
            "room_scan2.pcd",
            112624,
            [0.10515809804201126, 0.0583319291472435, 1.6957420110702515],
            [
                0.0016253780340775847,
                0.000917886383831501,
                -0.10998419672250748,
            ],
            [10314.775169459943, -5719.048925762618, 46922.92353267223],
        ),
    ];
    for (name, n, first, last, sum) in cases {
        let c = cloud(&dir, name);
        assert_eq!((c.len(), c.dropped_non_finite), (n, 0), "{name}");
        assert_eq!(c.points[0].map(|v| v as f64), first, "{name}");
        assert_eq!(c.points[n - 1].map(|v| v as f64), last, "{name}");
        let s = sums(&c.points);
        for k in 0..3 {
            assert!(
                (s[k] - sum[k]).abs() <= 1e-9 * sum[k].abs(),
                "{name} sum {k}: {} vs {}",
                s[k],
                sum[k]
            );
        }
    }
}

/// A PCD header for fields `x y z i` (F4 each; `i` has COUNT 2) and `n` points.
fn header(n: usize, data: &str) -> String {
    format!(
        "# .PCD v0.7\nVERSION 0.7\nFIELDS i x y z\nSIZE 4 4 4 4\nTYPE F F F F\nCOUNT 2 1 1 1\n\
         WIDTH {n}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA {data}\n"
    )
}

const PTS: [[f32; 3]; 4] = [
    [1.0, 2.0, 3.0],
    [f32::NAN, 0.0, 0.0],
    [-4.5, 5.25, -6.0],
    [0.0, f32::INFINITY, 1.0],
];

#[test]
fn written_pcd_round_trips_in_every_encoding_and_drops_non_finite() {
    let path = Path::new("mem.pcd");
    // ascii
    let mut ascii = header(4, "ascii");
    for p in PTS {
        ascii += &format!("7 8 {} {} {}\n", p[0], p[1], p[2]);
    }
    // binary (AoS): i0 i1 x y z
    let mut binary = header(4, "binary").into_bytes();
    for p in PTS {
        for v in [7.0, 8.0, p[0], p[1], p[2]] {
            binary.extend_from_slice(&f32::to_le_bytes(v));
        }
    }
    // binary_compressed (SoA), LZF stream of literal runs only (a valid LZF encoding).
    let mut soa = Vec::new();
    for _ in PTS {
        soa.extend(f32::to_le_bytes(7.0));
        soa.extend(f32::to_le_bytes(8.0));
    }
    for k in 0..3 {
        for p in PTS {
            soa.extend(f32::to_le_bytes(p[k]));
        }
    }
    let mut lzf = Vec::new();
    for run in soa.chunks(32) {
        lzf.push((run.len() - 1) as u8);
        lzf.extend_from_slice(run);
    }
    let mut compressed = header(4, "binary_compressed").into_bytes();
    compressed.extend((lzf.len() as u32).to_le_bytes());
    compressed.extend((soa.len() as u32).to_le_bytes());
    compressed.extend(&lzf);
    for bytes in [ascii.into_bytes(), binary, compressed] {
        let c = parse_cloud(path, &bytes).unwrap();
        assert_eq!(c.points, vec![PTS[0], PTS[2]]);
        assert_eq!(c.dropped_non_finite, 2);
    }
}

fn ply_header(format: &str, n: usize) -> String {
    format!(
        "ply\nformat {format} 1.0\ncomment written by the test\nelement vertex {n}\nproperty uchar red\n\
         property double x\nproperty float y\nproperty list uchar int junk\nproperty float z\n\
         element face 1\nproperty list uchar int vertex_indices\nend_header\n"
    )
}

#[test]
fn ply_ascii_and_binary_both_byte_orders() {
    let path = Path::new("mem.ply");
    let mut ascii = ply_header("ascii", 4);
    for p in PTS {
        ascii += &format!("255 {} {} 2 9 9 {}\n", p[0], p[1], p[2]);
    }
    ascii += "3 0 1 2\n";
    let mut out = vec![ascii.into_bytes()];
    for big in [false, true] {
        let mut b = ply_header(
            if big {
                "binary_big_endian"
            } else {
                "binary_little_endian"
            },
            4,
        )
        .into_bytes();
        let put = |b: &mut Vec<u8>, le: &[u8]| {
            let mut v = le.to_vec();
            if big {
                v.reverse();
            }
            b.extend(v);
        };
        for p in PTS {
            b.push(255);
            put(&mut b, &(p[0] as f64).to_le_bytes());
            put(&mut b, &p[1].to_le_bytes());
            b.push(1);
            put(&mut b, &9i32.to_le_bytes());
            put(&mut b, &p[2].to_le_bytes());
        }
        out.push(b);
    }
    for bytes in out {
        let c = parse_cloud(path, &bytes).unwrap();
        assert_eq!(c.points, vec![PTS[0], PTS[2]]);
        assert_eq!(c.dropped_non_finite, 2);
    }
}

fn format_error(bytes: &[u8]) -> String {
    match parse_cloud(Path::new("/data/bad.pcd"), bytes) {
        Err(e @ Error::Format { .. }) => e.to_string(),
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn errors_name_the_file_and_the_problem() {
    let missing = read_cloud("/nonexistent/dir/scan.pcd").unwrap_err();
    assert!(
        matches!(missing, Error::Io { .. })
            && missing.to_string().contains("/nonexistent/dir/scan.pcd")
    );

    let mut bin = header(4, "binary").into_bytes();
    bin.extend([0u8; 30]);
    let e = format_error(&bin);
    assert!(e.starts_with("/data/bad.pcd: truncated"), "{e}");

    let e = format_error(format!("{}1 2 3 4 5\n", header(2, "ascii")).as_bytes());
    assert!(e.contains("truncated") && e.contains("2 points"), "{e}");

    let no_z = "VERSION 0.7\nFIELDS x y\nSIZE 4 4\nTYPE F F\nWIDTH 1\nPOINTS 1\nDATA ascii\n1 2\n";
    let e = format_error(no_z.as_bytes());
    assert!(e.contains("no `z` field"), "{e}");

    let mut comp = header(4, "binary_compressed").into_bytes();
    comp.extend(100u32.to_le_bytes());
    comp.extend(80u32.to_le_bytes());
    comp.extend([0u8; 10]);
    let e = format_error(&comp);
    assert!(e.contains("truncated"), "{e}");

    let e = format_error(b"hello world\n");
    assert!(
        e.contains("/data/bad.pcd") && e.contains("unknown header keyword"),
        "{e}"
    );

    let e = parse_cloud(Path::new("x.ply"), ply_header("ascii", 2).as_bytes())
        .unwrap_err()
        .to_string();
    assert!(e.contains("x.ply") && e.contains("truncated"), "{e}");
    let no_vertex = "ply\nformat ascii 1.0\nelement face 0\nend_header\n";
    let e = parse_cloud(Path::new("x.ply"), no_vertex.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no `vertex` element"), "{e}");
}

#[test]
fn truncated_real_files_are_errors() {
    let Some(dir) = pointclouds_dir() else { return };
    for name in ["251370668.pcd", "room_scan1.pcd", "bun0.pcd"] {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let cut = &bytes[..bytes.len() * 2 / 3];
        let e = parse_cloud(&dir.join(name), cut).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains("truncated"), "{name}: {e}");
    }
}
