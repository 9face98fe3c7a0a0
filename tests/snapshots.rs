//! Every kernel's PTX, per shipped target, against its reviewed snapshot in `ptx_snapshots/`.
//! A change fails here: review it with `cargo insta review` (or rerun with `INSTA_UPDATE=always`
//! and read the diff in git). Snapshots no kernel produces are an error too.

use ptxflow::kernels::ALL_KERNELS;
use std::collections::BTreeSet;
use std::path::Path;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/ptx_snapshots");

#[test]
fn every_kernel_matches_its_snapshot() {
    for &id in ALL_KERNELS {
        for &target in id.targets() {
            let ptx = ptxflow::embedded::ptx(id, target).expect("embedded by build.rs");
            insta::with_settings!({
                snapshot_path => "../ptx_snapshots",
                prepend_module_to_snapshot => false,
                omit_expression => true,
                description => format!("{} for {}; review with `cargo insta review`", id.name(), target),
            }, {
                insta::assert_snapshot!(id.file_stem(target), ptx);
            });
        }
    }
}

#[test]
fn emission_is_deterministic() {
    for &id in ALL_KERNELS {
        for &target in id.targets() {
            let a = id.build(target).emit().unwrap();
            let b = id.build(target).emit().unwrap();
            assert_eq!(a, b, "{} emitted different bytes twice", id.name());
            assert_eq!(
                a,
                ptxflow::embedded::ptx(id, target).unwrap(),
                "{}: build.rs output differs",
                id.name()
            );
        }
    }
}

#[test]
fn no_unreferenced_snapshots() {
    let expected: BTreeSet<String> = ALL_KERNELS
        .iter()
        .flat_map(|&id| {
            id.targets()
                .iter()
                .map(move |&t| format!("{}.snap", id.file_stem(t)))
        })
        .collect();
    let mut stray = Vec::new();
    for entry in std::fs::read_dir(Path::new(DIR)).expect("ptx_snapshots/ exists") {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let is_snapshot = name.ends_with(".snap")
            || name.ends_with(".snap.new")
            || name.ends_with(".pending-snap");
        if is_snapshot && !expected.contains(&name) {
            stray.push(name);
        }
    }
    assert!(
        stray.is_empty(),
        "snapshots that no kernel of the table produces (delete them or restore the kernel): {stray:?}"
    );
}
