//! Library entry points given impossible sizes, shapes or counts (issue 12 item 2): each returns a
//! `ptxflow::Error` before allocating, never panics, aborts or wraps a size. Runs on the CPU; the
//! one device test (a huge device allocation comes back as an error) skips without a GPU.
//! Every call runs under the counting allocator of the fuzz suite and must stay under 1 MiB.

mod common;
mod fuzz_support;

use fuzz_support::{run_case, CountingAlloc};
use nalgebra::Isometry3;
use ptxflow::gaussian::validate::check_distance_out;
use ptxflow::lz4::gpu::GpuOptions;
use ptxflow::lz4::CpuPageStream;
use ptxflow::ndt::gpu::GpuCapacity;
use ptxflow::rnn::reference::{dense_relu, gru_rollout, lowrank_correct};
use ptxflow::rnn::rsvd::rsvd_cpu;
use ptxflow::rnn::testmat::to_dmatrix;
use ptxflow::rnn::{DenseLayer, GruWeights, LowRank, RolloutShape, RsvdOptions};
use ptxflow::{Error, Result};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const HUGE: usize = usize::MAX / 2 + 1;

/// Runs `f`, which must fail with an error that `ok` accepts, within 1 MiB of heap.
fn rejects<T: std::fmt::Debug>(what: &str, ok: fn(&Error) -> bool, f: impl FnOnce() -> Result<T>) {
    let (r, cost) = run_case(what, 0, &[], f);
    match r {
        Err(e) if ok(&e) => {}
        other => panic!("{what}: expected a size error, got {other:?}"),
    }
    assert!(
        cost.peak_bytes < 1 << 20,
        "{what}: {} bytes allocated before the error",
        cost.peak_bytes
    );
}

fn input(e: &Error) -> bool {
    matches!(e, Error::Input { .. })
}
fn capacity(e: &Error) -> bool {
    matches!(e, Error::Capacity { .. })
}
fn input_or_capacity(e: &Error) -> bool {
    input(e) || capacity(e)
}

#[test]
fn ndt_counts_are_checked() {
    let c = Isometry3::identity();
    rejects("hypotheses(usize::MAX)", capacity, || {
        ptxflow::ndt::hypotheses(&c, usize::MAX, 0.1, 1.0, 1)
    });
    rejects("hypotheses(2^50)", capacity, || {
        ptxflow::ndt::hypotheses(&c, 1 << 50, 0.1, 1.0, 1)
    });
    assert_eq!(
        ptxflow::ndt::hypotheses(&c, 3, 0.1, 1.0, 1).unwrap().len(),
        3
    );
    let ok = GpuCapacity {
        points: 1000,
        voxels: 100,
        requests: 8,
    };
    ok.check().unwrap();
    for (what, bad) in [
        (
            "points 2^40",
            GpuCapacity {
                points: 1 << 40,
                ..ok
            },
        ),
        (
            "voxels usize::MAX",
            GpuCapacity {
                voxels: usize::MAX,
                ..ok
            },
        ),
        ("requests 0", GpuCapacity { requests: 0, ..ok }),
        (
            "requests 2^20",
            GpuCapacity {
                requests: 1 << 20,
                ..ok
            },
        ),
    ] {
        rejects(what, input_or_capacity, || bad.check());
    }
}

#[test]
fn lz4_page_streams_are_checked() {
    rejects("CpuPageStream slots usize::MAX", input, || {
        CpuPageStream::new(65536, usize::MAX)
    });
    // Representable, but more than any host holds: the reservation fails as an error.
    rejects("CpuPageStream slots 2^40", capacity, || {
        CpuPageStream::new(65536, 1 << 40)
    });
    rejects("CpuPageStream page 3 bytes", input, || {
        CpuPageStream::new(3, 4)
    });
    CpuPageStream::new(4096, 4).unwrap();
    GpuOptions::default().check().unwrap();
    for bad in [
        GpuOptions {
            batch_bytes: 1 << 40,
            slots: 4,
        },
        GpuOptions {
            batch_bytes: 1 << 20,
            slots: 0,
        },
        GpuOptions {
            batch_bytes: 1 << 20,
            slots: usize::MAX,
        },
    ] {
        rejects("GpuOptions", input, || bad.check());
    }
}

#[test]
fn gaussian_distance_shape_is_checked() {
    rejects("distance matrix usize::MAX x 2", input, || {
        check_distance_out(usize::MAX, 2, 0)
    });
    check_distance_out(3, 4, 12).unwrap();
}

#[test]
fn rnn_shapes_and_ranks_are_checked() {
    rejects("DenseLayer HUGE x 2", input, || {
        DenseLayer::new(HUGE, 2, vec![], vec![0.0; 2])
    });
    rejects("GruWeights HUGE hidden", input, || {
        GruWeights::new(2, HUGE, vec![], vec![], vec![], vec![], None)
    });
    rejects("to_dmatrix HUGE x 2", input, || to_dmatrix(&[], HUGE, 2));
    rejects("LowRank HUGE x 2", input, || {
        LowRank::new(HUGE, 2, 1, vec![], vec![1.0], vec![])
    });
    rejects("rsvd_cpu HUGE x 3", input, || {
        rsvd_cpu(&[], HUGE, 3, &RsvdOptions::rank(1))
    });
    let overflowing = RsvdOptions {
        oversample: usize::MAX,
        ..RsvdOptions::rank(2)
    };
    rejects("rsvd oversample usize::MAX", input, || {
        overflowing.validate(10, 10)
    });
    rejects("rsvd rank 0", input, || {
        RsvdOptions::rank(0).validate(10, 10)
    });
    rejects("rsvd rank 11 of 10 x 20", input, || {
        RsvdOptions::rank(11).validate(10, 20)
    });
    RsvdOptions::rank(10).validate(10, 20).unwrap();

    let layer = DenseLayer::new(2, 3, vec![0.5; 6], vec![0.0; 3]).unwrap();
    rejects("dense_relu batch HUGE", input, || {
        dense_relu(&layer, &[], HUGE)
    });
    let lr = LowRank::new(4, 3, 1, vec![0.1; 4], vec![1.0], vec![0.2; 3]).unwrap();
    rejects("lowrank_correct batch HUGE", input, || {
        lowrank_correct(&lr, &[], &[], HUGE)
    });
    let mut rng = ptxflow::rng::Rng::new(5);
    let gru = GruWeights::random(&mut rng, 2, 3, false);
    let shape = RolloutShape {
        steps: HUGE,
        batch: 4,
    };
    rejects("gru_rollout steps HUGE", input, || {
        gru_rollout(&gru, &[], &[0.0; 12], shape, None, 0)
    });
}

#[test]
fn huge_device_allocations_are_errors() {
    let Some(gpu) = common::gpu_or_skip("huge_device_allocations_are_errors") else {
        return;
    };
    use ptxflow::runtime::{DeviceBuffer, PinnedBuffer, PinnedKind};
    // 2^50 bytes: representable, far beyond any device; the driver's refusal is an error.
    let r = DeviceBuffer::<u8>::zeros(gpu.stream(), 1 << 50, "huge test buffer");
    assert!(matches!(r, Err(Error::Driver { .. })), "{:?}", r.err());
    let r = DeviceBuffer::<u64>::zeros(gpu.stream(), usize::MAX / 4, "overflowing test buffer");
    assert!(matches!(r, Err(Error::Capacity { .. })), "{:?}", r.err());
    let r = PinnedBuffer::<u8>::new(&gpu, 1 << 50, PinnedKind::Download);
    assert!(r.is_err(), "a 1 PiB pinned buffer was allocated");
    // The device is still usable afterwards.
    let b = DeviceBuffer::<u32>::from_host(gpu.stream(), &[1, 2, 3], "after").unwrap();
    assert_eq!(b.to_vec(gpu.stream()).unwrap(), vec![1, 2, 3]);
}

#[test]
fn gpu_frame_decode_leaves_unbacked_block_slots_to_the_cpu() {
    let Some(gpu) = common::gpu_or_skip("gpu_frame_decode_leaves_unbacked_block_slots_to_the_cpu")
    else {
        return;
    };
    use ptxflow::lz4::frame_header::FrameHeader;
    // 200000 one-byte raw blocks under a content size of 2^40: one 64 KiB device page each
    // would be 13 GB on the device and on the host for a 1 MB input.
    let mut frame = FrameHeader {
        block_independent: true,
        block_checksum: false,
        content_size: Some(1 << 40),
        content_checksum: false,
        dict_id: None,
        block_max_bytes: 65536,
    }
    .to_bytes()
    .unwrap();
    for _ in 0..200_000 {
        frame.extend(0x8000_0001u32.to_le_bytes());
        frame.push(b'x');
    }
    frame.extend(0u32.to_le_bytes());
    let kernels = ptxflow::lz4::gpu::Lz4Kernels::new(gpu).unwrap();
    let mut out = Vec::new();
    let r = ptxflow::lz4::gpu::decode_frames_gpu(&kernels, &frame, &mut out);
    assert!(matches!(r, Ok(None)), "{r:?}");
    assert!(out.is_empty());
    // The CPU decoder reads it in bounded memory and reports the size mismatch.
    let e = ptxflow::lz4::decompress_frame(&frame)
        .unwrap_err()
        .to_string();
    assert!(e.contains("1099511627776"), "{e}");
}

#[test]
fn lz4_block_decode_reserves_what_the_block_can_give() {
    // A 2-byte block (one literal) told to expect 2^40 or usize::MAX bytes.
    for expected in [1usize << 40, usize::MAX] {
        rejects(
            "decode_block huge expected",
            |e| matches!(e, Error::Corrupt { .. }),
            || ptxflow::lz4::decode_block(&[0x10, b'a'], expected),
        );
    }
    assert_eq!(ptxflow::lz4::decode_block(&[0x10, b'a'], 1).unwrap(), b"a");
}
