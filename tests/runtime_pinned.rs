//! The runtime's page-locked host memory ([`PinnedBuffer`]) on the GPU: every kind (upload,
//! download, mapped, registered) carries data both ways intact, host views wait for the copies
//! they must, mapped memory is reachable from the device, copies on two streams into one buffer
//! are both waited for, and bad ranges are errors, not panics or stray copies. A caller's own
//! memory registered in place ([`HostRegistration`]) carries copies both ways.

mod common;

use ptxflow::runtime::{
    device_can_map, CudaSlice, DeviceAccess, Gpu, HostRegistration, PinnedBuffer, PinnedKind,
};
use ptxflow::Error;
use std::sync::Arc;

/// Elements per test buffer: odd, and large enough (16 MiB of u32) that a copy is still
/// running when the host looks unless the view waits.
const N: usize = (4 << 20) + 3;

fn pattern(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(seed))
        .collect()
}

fn kinds(gpu: &Gpu) -> Vec<(&'static str, PinnedBuffer<u32>)> {
    let mut v = vec![
        (
            "upload",
            PinnedBuffer::new(gpu, N, PinnedKind::Upload).unwrap(),
        ),
        (
            "download",
            PinnedBuffer::new(gpu, N, PinnedKind::Download).unwrap(),
        ),
        ("registered", PinnedBuffer::registered(gpu, N).unwrap()),
    ];
    if device_can_map(gpu) {
        v.push((
            "mapped",
            PinnedBuffer::new(gpu, N, PinnedKind::Mapped).unwrap(),
        ));
    }
    v
}

#[test]
fn every_kind_round_trips_through_the_device() {
    let Some(gpu) = common::gpu_or_skip("every_kind_round_trips_through_the_device") else {
        return;
    };
    let s = gpu.stream().clone();
    let mut dev: CudaSlice<u32> = s.alloc_zeros(N).unwrap();
    for (seed, (name, mut host)) in kinds(&gpu).into_iter().enumerate() {
        assert_eq!(host.len(), N, "{name}");
        assert!(
            host.as_slice().unwrap().iter().all(|&v| v == 0),
            "{name}: not zeroed"
        );
        let want = pattern(seed as u32, N);
        host.write(0, &want).unwrap();
        host.upload(&s, 0..N, &mut dev).unwrap();
        // Overwriting the host copy must wait for the upload that reads it.
        host.fill(0, N, u32::MAX).unwrap();
        host.download(&s, &dev, 0).unwrap();
        // No synchronization: the view waits for the download.
        assert!(
            host.as_slice().unwrap() == want.as_slice(),
            "{name}: data differs"
        );
        let mut tail = [0u32; 3];
        host.read(N - 3, &mut tail).unwrap();
        assert_eq!(tail, want[N - 3..], "{name}");
    }
    gpu.check_healthy().unwrap();
}

#[test]
fn mapped_memory_is_written_by_the_device() {
    let Some(gpu) = common::gpu_or_skip("mapped_memory_is_written_by_the_device") else {
        return;
    };
    let download = PinnedBuffer::<u32>::new(&gpu, 16, PinnedKind::Download).unwrap();
    assert_eq!(
        download.device_ptr(),
        None,
        "only mapped buffers have a device address"
    );
    if !device_can_map(&gpu) {
        let r = PinnedBuffer::<u32>::new(&gpu, 16, PinnedKind::Mapped);
        assert!(r.is_err(), "mapped allocation on a device that cannot map");
        return;
    }
    let mut m = PinnedBuffer::<u32>::new(&gpu, N, PinnedKind::Mapped).unwrap();
    let d = m
        .device_ptr()
        .expect("mapped buffers have a device address");
    let s = gpu.stream().clone();
    let want = pattern(3, N);
    let src = s.clone_htod(&want).unwrap();
    let (sp, _) = cudarc::driver::DevicePtr::device_ptr(&src, &s);
    // SAFETY: `d` addresses the N mapped elements of `m` and `sp` the N elements of `src`; both
    // outlive the copy (`m` records it below, so its views and Drop wait for it).
    unsafe { cudarc::driver::result::memcpy_dtod_async(d, sp, 4 * N, s.cu_stream()) }.unwrap();
    m.record_use(&s).unwrap();
    assert!(
        m.as_slice().unwrap() == want.as_slice(),
        "the device's writes are not visible"
    );
}

#[test]
fn copies_on_two_streams_are_both_waited_for() {
    let Some(gpu) = common::gpu_or_skip("copies_on_two_streams_are_both_waited_for") else {
        return;
    };
    let (s1, s2) = (gpu.stream().clone(), gpu.ctx().new_stream().unwrap());
    let half = N / 2;
    let a = pattern(1, half);
    let b = pattern(2, N - half);
    let da = s1.clone_htod(&a).unwrap();
    let db = s2.clone_htod(&b).unwrap();
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
    let mut host = PinnedBuffer::<u32>::new(&gpu, N, PinnedKind::Download).unwrap();
    host.download(&s1, &da, 0).unwrap();
    host.download(&s2, &db, half).unwrap();
    let v = host.as_slice().unwrap();
    assert!(
        v[..half] == a[..] && v[half..] == b[..],
        "a copy was not waited for"
    );
    // download_now blocks for its copy and for the copies recorded before it on other streams.
    let mut host = PinnedBuffer::<u32>::new(&gpu, N, PinnedKind::Download).unwrap();
    host.download(&s2, &db, half).unwrap();
    host.download_now(&s1, &da, 0).unwrap();
    let v = host.as_slice().unwrap();
    assert!(
        v[..half] == a[..] && v[half..] == b[..],
        "download_now did not wait"
    );
}

#[test]
fn buffers_move_between_threads_and_drop_with_copies_in_flight() {
    let Some(gpu) =
        common::gpu_or_skip("buffers_move_between_threads_and_drop_with_copies_in_flight")
    else {
        return;
    };
    let s = gpu.stream().clone();
    let want = pattern(7, N);
    let dev = s.clone_htod(&want).unwrap();
    let mut host = PinnedBuffer::<u32>::registered(&gpu, N).unwrap();
    host.download(&s, &dev, 0).unwrap();
    let got = std::thread::spawn(move || host.as_slice().unwrap().to_vec())
        .join()
        .unwrap();
    assert!(got == want);
    // Dropped while the download may still run: Drop waits, nothing faults.
    for kind in [PinnedKind::Upload, PinnedKind::Download] {
        let mut h = PinnedBuffer::<u32>::new(&gpu, N, kind).unwrap();
        h.download(&s, &dev, 0).unwrap();
    }
    let mut r = PinnedBuffer::<u32>::registered(&gpu, N).unwrap();
    r.download(&s, &dev, 0).unwrap();
    drop(r);
    gpu.check_healthy().unwrap();
}

#[test]
fn bad_ranges_and_sizes_are_errors() {
    let Some(gpu) = common::gpu_or_skip("bad_ranges_and_sizes_are_errors") else {
        return;
    };
    let s = gpu.stream().clone();
    let mut host = PinnedBuffer::<u32>::new(&gpu, 8, PinnedKind::Download).unwrap();
    let mut dev: CudaSlice<u32> = s.alloc_zeros(8).unwrap();
    let capacity = |r: ptxflow::Result<()>| matches!(r, Err(Error::Capacity { .. }));
    assert!(capacity(host.write(5, &[1; 4])));
    assert!(capacity(host.fill(9, 0, 1)));
    assert!(capacity(host.read(0, &mut [0; 9])));
    assert!(capacity(host.upload(&s, 4..12, &mut dev)));
    assert!(capacity(host.download(&s, &dev, 1)));
    let mut short: CudaSlice<u32> = s.alloc_zeros(3).unwrap();
    let r = host.upload(&s, 0..4, &mut short);
    assert!(matches!(r, Err(Error::Shape { .. })), "{r:?}");
    #[allow(clippy::reversed_empty_ranges)]
    let r = host.upload(&s, 4..2, &mut dev);
    assert!(matches!(r, Err(Error::Input { .. })), "{r:?}");
    // Empty copies are no-ops.
    host.upload(&s, 3..3, &mut dev).unwrap();
    host.download(&s, &dev.slice(0..0), 8).unwrap();
    for r in [
        PinnedBuffer::<u64>::new(&gpu, usize::MAX / 4, PinnedKind::Upload).err(),
        PinnedBuffer::<u64>::registered(&gpu, usize::MAX / 4).err(),
    ] {
        assert!(matches!(r, Some(Error::Capacity { .. })), "{r:?}");
    }
    // The device is still usable afterwards.
    host.write(0, &[1, 2, 3]).unwrap();
    host.upload(&s, 0..3, &mut dev).unwrap();
    assert_eq!(s.clone_dtoh(&dev.slice(0..3)).unwrap(), vec![1, 2, 3]);
    let _keep: Arc<Gpu> = gpu;
}

#[test]
fn callers_memory_registered_in_place_carries_copies() {
    let Some(gpu) = common::gpu_or_skip("callers_memory_registered_in_place_carries_copies") else {
        return;
    };
    let s = gpu.stream().clone();
    const PAGE: usize = 4096;
    let n = 64 * PAGE;
    let mut host = vec![0u8; n + PAGE];
    let at = host.as_ptr().align_offset(PAGE);
    let want: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
    host[at..at + n].copy_from_slice(&want);
    let mut dev: CudaSlice<u8> = s.alloc_zeros(n).unwrap();
    let region = &mut host[at..at + n];
    {
        // SAFETY: `region` is a live part of `host`, which outlives the registration; the
        // stream is synchronized before the registration ends.
        let reg = unsafe {
            HostRegistration::new(gpu.ctx(), region.as_mut_ptr(), n, DeviceAccess::Reads)
        }
        .unwrap();
        assert_eq!((reg.ptr(), reg.len()), (region.as_mut_ptr(), n));
        // Registering the same pages twice is the driver's error, not a crash.
        // SAFETY: as above; the call fails, so nothing is registered.
        let again = unsafe {
            HostRegistration::new(gpu.ctx(), region.as_mut_ptr(), n, DeviceAccess::Reads)
        };
        assert!(matches!(again, Err(Error::Driver { .. })), "{again:?}");
        s.memcpy_htod(&*region, &mut dev).unwrap();
        s.synchronize().unwrap();
    }
    region.fill(0);
    {
        // SAFETY: as above.
        let _reg = unsafe {
            HostRegistration::new(
                gpu.ctx(),
                region.as_mut_ptr(),
                n,
                DeviceAccess::ReadsAndWrites,
            )
        }
        .unwrap();
        s.memcpy_dtoh(&dev, region).unwrap();
        s.synchronize().unwrap();
    }
    assert!(
        host[at..at + n] == want[..],
        "registered round trip differs"
    );
    gpu.check_healthy().unwrap();
}
