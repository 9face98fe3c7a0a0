//! A sticky device fault (an illegal address poisons the CUDA context) in the middle of a GPU
//! page stream: the stream notices, compresses every pending page again on the CPU from its host
//! copy, continues on the CPU, and reports it; no page is lost or duplicated. In a test binary of
//! its own, since the fault breaks the context for the whole process.

mod common;
mod lz4_support;

use ptxflow::lz4::gpu::{GpuOptions, GpuPageCodec, GpuPageStream};
use ptxflow::lz4::{compress_page, CodecPath, CompressedPage, PageCodec, PageStream};
use ptxflow::rng::Rng;

#[test]
fn sticky_fault_moves_the_stream_to_the_cpu_without_losing_pages() {
    let Some(gpu) =
        common::gpu_or_skip("sticky_fault_moves_the_stream_to_the_cpu_without_losing_pages")
    else {
        return;
    };
    let mut rng = Rng::new(5);
    let data: Vec<u8> = lz4_support::corpus("dickens", Some(300_000)).unwrap_or_else(|| {
        (0..300_000)
            .map(|i| {
                if i % 7 == 0 {
                    rng.next_u64() as u8
                } else {
                    (i / 13) as u8
                }
            })
            .collect()
    });
    let pb = 4096;
    let pages: Vec<&[u8]> = data.chunks(pb).collect();
    let mut s = GpuPageStream::new(
        gpu.clone(),
        pb,
        GpuOptions {
            batch_bytes: 8 * pb,
            slots: 3,
        },
    )
    .unwrap();
    let mut out = CompressedPage::default();
    let mut got = Vec::new();
    // Some pages popped, some in flight, some in the filling slot when the fault strikes.
    for p in &pages[..20] {
        s.push_page(p).unwrap();
    }
    for _ in 0..5 {
        assert!(s.pop_page(&mut out).unwrap());
        got.push(out.clone());
    }
    assert_eq!(s.path(), CodecPath::Gpu);
    s.kernels().unwrap().provoke_sticky_fault().unwrap();
    let mut next = 20;
    while got.len() < pages.len() {
        while next < pages.len() && s.free_slots() > 0 {
            s.push_page(pages[next]).unwrap();
            next += 1;
        }
        assert!(s.pop_page(&mut out).unwrap(), "page {} missing", got.len());
        got.push(out.clone());
    }
    assert!(!s.pop_page(&mut out).unwrap(), "a page was duplicated");
    assert_eq!(s.path(), CodecPath::Cpu);
    let why = s.fallback_reason().expect("the fallback says why");
    eprintln!("fallback reason: {why}");
    for (k, (p, g)) in pages.iter().zip(&got).enumerate() {
        let (want, kind) = compress_page(p).unwrap();
        assert!(
            g.bytes == want && g.kind == kind && g.original_bytes == p.len(),
            "page {k} differs"
        );
    }
    // A batch codec on the broken context notices too and answers from the CPU.
    match GpuPageCodec::new(gpu, GpuOptions::default()) {
        Err(e) => eprintln!("codec on the broken context refused: {e}"),
        Ok(mut codec) => {
            let pages = codec.compress_pages(&data, pb).unwrap();
            assert_eq!(pages.path, CodecPath::Cpu);
            assert!(codec.fallback_reason().is_some());
        }
    }
}
