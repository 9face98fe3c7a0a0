//! Host-side measurements behind the GPU codec's ring design from ordinary memory
//! (`PTXFLOW_LZ4_HOSTBENCH=1`, printed as HOST lines before the variants): the slot copies'
//! inner loops (fill-shaped: ordinary -> pinned, sink-shaped: registered -> ordinary, alone and
//! side by side as a ring step runs them), the driver's registration rate alone and beside the
//! pinned ring and the copies, the copy engine into and out of registered ordinary memory
//! against pinned memory, and transparent huge pages.

use super::common;
use ptxflow::lz4::gpu::GpuPageCodec;
use ptxflow::lz4::par::{self, CopyLoop};
use ptxflow::runtime::{Gpu, PinnedBuffer, PinnedKind};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

const MIB: usize = 1 << 20;
const COPY_BYTES: usize = 64 * MIB;
const PIECE: usize = 16 * MIB;

fn gbs(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

/// Page-aligned (2 MiB) ordinary memory, freed on drop; `advice` is passed to madvise before
/// the first touch (MADV_HUGEPAGE or MADV_NOHUGEPAGE).
struct Region {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Region {
    fn new(len: usize, advice: Option<i32>) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, 2 * MIB).expect("layout");
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        assert!(!ptr.is_null(), "allocation");
        if let Some(a) = advice {
            // SAFETY: our own live, untouched allocation.
            unsafe { libc::madvise(ptr.cast(), len, a) };
        }
        Region { ptr, layout }
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: our allocation; u8 has no invalid values, and every caller writes it before
        // reading (the first use is `touch`).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// AnonHugePages of this process, KiB.
fn anon_huge_kib() -> usize {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("AnonHugePages:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Registers and unregisters `buf` in 16 MiB pieces on this thread; seconds.
fn register_all(gpu: &Gpu, buf: &mut [u8]) -> f64 {
    gpu.ctx().bind_to_thread().expect("bind");
    let t = Instant::now();
    for piece in buf.chunks_mut(PIECE) {
        // SAFETY: a live, exclusively borrowed range, unregistered right after.
        unsafe {
            let p: *mut c_void = piece.as_mut_ptr().cast();
            cudarc::driver::sys::cuMemHostRegister_v2(p, piece.len(), 0)
                .result()
                .expect("register");
            cudarc::driver::sys::cuMemHostUnregister(p)
                .result()
                .expect("unregister");
        }
    }
    t.elapsed().as_secs_f64()
}

/// Runs `work` on this thread while another registers and unregisters 16 MiB pieces of a 256
/// MiB buffer in a loop; returns (work's result, registration GB/s meanwhile).
fn beside_registration<R>(gpu: &Arc<Gpu>, work: impl FnOnce() -> R) -> (R, f64) {
    let mut buf = vec![1u8; 256 * MIB + 64 * 1024];
    let off = buf.as_ptr().align_offset(64 * 1024);
    let region = &mut buf[off..off + 256 * MIB];
    let stop = AtomicBool::new(false);
    let done = AtomicUsize::new(0);
    let t = Instant::now();
    let r = std::thread::scope(|s| {
        let (stop, done) = (&stop, &done);
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for piece in region.chunks_mut(PIECE) {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    register_all(gpu, piece);
                    done.fetch_add(piece.len(), Ordering::Relaxed);
                }
            }
        });
        let r = work();
        stop.store(true, Ordering::Relaxed);
        r
    });
    (
        r,
        gbs(done.load(Ordering::Relaxed), t.elapsed().as_secs_f64()),
    )
}

/// The HOST lines.
pub fn run(gpu: &Arc<Gpu>, codec: &mut GpuPageCodec, ring_input: &[u8]) {
    let src = vec![3u8; COPY_BYTES];
    let mut dst = vec![0u8; COPY_BYTES];
    let mut pinned =
        PinnedBuffer::<u8>::new(gpu, COPY_BYTES, PinnedKind::Download).expect("pinned");
    let mut reg = PinnedBuffer::<u8>::registered(gpu, COPY_BYTES).expect("registered");
    reg.as_mut_slice().expect("view").fill(5);
    let saved = (par::streaming_stores(), par::copy_loop());
    let kinds: [(&str, (bool, bool), usize, bool); 9] = [
        ("memcpy both ways", (false, false), 0, false),
        ("memcpy in, nt out (default)", (false, true), 0, false),
        ("nt both", (true, true), 0, false),
        ("nt both, prefetch 512", (true, true), 512, false),
        ("nt both, prefetch 2048", (true, true), 2048, false),
        ("nt both, prefetch 4096", (true, true), 4096, false),
        ("avx2 nt both", (true, true), 0, true),
        ("avx2 nt both, prefetch 2048", (true, true), 2048, true),
        ("sse in + nt out, prefetch 2048", (false, true), 2048, false),
    ];
    for (name, st, prefetch, wide) in kinds {
        par::set_streaming_stores(st.0, st.1);
        par::set_copy_loop(CopyLoop { prefetch, wide });
        let pv = pinned.as_mut_slice().expect("view");
        let fill = common::wall_median_secs(5, || par::par_copy_to_slot(pv, &src));
        let rv = reg.as_slice().expect("view");
        let sink = common::wall_median_secs(5, || {
            dst.clear();
            par::par_extend_from_slot(&mut dst, rv)
        });
        let both = common::wall_median_secs(5, || {
            rayon::join(
                || par::par_copy_to_slot(pv, &src),
                || {
                    dst.clear();
                    par::par_extend_from_slot(&mut dst, rv)
                },
            );
        });
        println!(
            "HOST copy {name}: fill {:.1} GB/s, sink {:.1} GB/s, both at once {:.1} GB/s ({} threads, 64 MiB each)",
            gbs(COPY_BYTES, fill),
            gbs(COPY_BYTES, sink),
            gbs(2 * COPY_BYTES, both),
            rayon::current_num_threads()
        );
    }
    par::set_streaming_stores(saved.0 .0, saved.0 .1);
    par::set_copy_loop(saved.1);

    // Registration alone, beside the pinned ring, beside the copies.
    let mut big = vec![1u8; 256 * MIB + 64 * 1024];
    let off = big.as_ptr().align_offset(64 * 1024);
    let alone = register_all(gpu, &mut big[off..off + 256 * MIB]);
    let alone = gbs(256 * MIB, alone);
    drop(big);
    let ring = |codec: &mut GpuPageCodec| {
        let mut v: Vec<f64> = (0..5)
            .map(|_| {
                codec
                    .time_pinned_pipeline(ring_input, 4096, 16, true)
                    .expect("pipeline")
            })
            .collect();
        v.sort_by(f64::total_cmp);
        gbs(ring_input.len() * 16, v[2])
    };
    let ring0 = ring(codec);
    let (ring1, reg_ring) = beside_registration(gpu, || ring(codec));
    par::set_streaming_stores(false, true);
    let pv = pinned.as_mut_slice().expect("view");
    let rv = reg.as_slice().expect("view");
    let mut both = || {
        common::wall_median_secs(9, || {
            rayon::join(
                || par::par_copy_to_slot(pv, &src),
                || {
                    dst.clear();
                    par::par_extend_from_slot(&mut dst, rv)
                },
            );
        })
    };
    let copy0 = gbs(2 * COPY_BYTES, both());
    let (copy1, reg_copy) = beside_registration(gpu, || gbs(2 * COPY_BYTES, both()));
    par::set_streaming_stores(saved.0 .0, saved.0 .1);
    println!(
        "HOST registration (one thread, 16 MiB pieces, register+unregister): alone {alone:.1} GB/s; \
         pinned ring {ring0:.1} GB/s alone, {ring1:.1} GB/s beside registration ({reg_ring:.1} GB/s meanwhile); \
         fill+sink copies {copy0:.1} GB/s alone, {copy1:.1} GB/s beside registration ({reg_copy:.1} GB/s meanwhile)"
    );

    // The copy engine into and out of registered ordinary memory against pinned memory.
    let s = gpu.stream().clone();
    let mut dev = s.alloc_zeros::<u8>(PIECE).expect("alloc");
    let mut plain = vec![7u8; PIECE];
    let (h2d_pin, d2h_pin) = {
        let pv = &mut pinned.as_mut_slice().expect("view")[..PIECE];
        let up = common::median_secs(&s, 7, || s.memcpy_htod(&*pv, &mut dev).expect("h2d"));
        let down = common::median_secs(&s, 7, || s.memcpy_dtoh(&dev, &mut *pv).expect("d2h"));
        (gbs(PIECE, up), gbs(PIECE, down))
    };
    gpu.ctx().bind_to_thread().expect("bind");
    let p: *mut c_void = plain.as_mut_ptr().cast();
    // SAFETY: `plain` lives until after the unregister below; the copies in between complete
    // (median_secs synchronizes) before it.
    unsafe {
        cudarc::driver::sys::cuMemHostRegister_v2(p, PIECE, 0)
            .result()
            .expect("register")
    };
    let up = common::median_secs(&s, 7, || s.memcpy_htod(&plain, &mut dev).expect("h2d"));
    let down = common::median_secs(&s, 7, || s.memcpy_dtoh(&dev, &mut plain).expect("d2h"));
    // SAFETY: registered above; no copy runs any more.
    unsafe {
        cudarc::driver::sys::cuMemHostUnregister(p)
            .result()
            .expect("unregister")
    };
    println!(
        "HOST copy engine, 16 MiB: pinned H2D {h2d_pin:.1} GB/s, D2H {d2h_pin:.1} GB/s; registered ordinary memory H2D {:.1} GB/s, D2H {:.1} GB/s",
        gbs(PIECE, up),
        gbs(PIECE, down)
    );

    // Transparent huge pages: first touch, registration, a fill-shaped copy out of it.
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let mut line = format!("HOST THP [{}]:", thp.trim());
    for (name, advice) in [
        ("MADV_NOHUGEPAGE", libc::MADV_NOHUGEPAGE),
        ("MADV_HUGEPAGE", libc::MADV_HUGEPAGE),
    ] {
        let before = anon_huge_kib();
        let mut r = Region::new(256 * MIB, Some(advice));
        let b = r.bytes();
        let t = Instant::now();
        {
            use rayon::prelude::*;
            b.par_chunks_mut(256 << 10).for_each(|c| c.fill(9));
        }
        let touch = t.elapsed().as_secs_f64();
        let huge = anon_huge_kib().saturating_sub(before) >> 10;
        let regs = register_all(gpu, b);
        let pv = pinned.as_mut_slice().expect("view");
        let copy = common::wall_median_secs(5, || par::par_copy_to_slot(pv, &b[..COPY_BYTES]));
        line += &format!(
            " {name}: {huge} MiB huge, first touch {:.1} GB/s, register+unregister {:.1} GB/s, copy out {:.1} GB/s;",
            gbs(256 * MIB, touch),
            gbs(256 * MIB, regs),
            gbs(COPY_BYTES, copy)
        );
    }
    println!("{line}");
}
