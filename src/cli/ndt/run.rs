//! The flow of `ptxflow ndt`: read the target and the first sources, choose the device, build the
//! map (while the GPU starts on its own thread), then align chunk after chunk of sources while
//! the next chunk is read in the background.

use super::engine::{start_gpu, Engine, Warm};
use super::inputs::{load, load_all, source_list, Loaded, Prefetch};
use super::output::*;
use super::timing::Timing;
use super::{parse_init, NdtArgs};
use nalgebra::Isometry3;
use ptxflow::ndt::gpu::MAX_REQUESTS_PER_LAUNCH;
use ptxflow::ndt::{
    best_result, hypotheses, target_map, CostModel, GpuCapacity, NdtParams, NdtResult, NdtWork,
};
use ptxflow::{Choice, Device, Error, Result};
use std::io::Write;
use std::thread::JoinHandle;
use std::time::Instant;

/// Standard output failed (a closed pipe, a full disk).
fn wio(source: std::io::Error) -> Error {
    Error::Io {
        path: "<standard output>".into(),
        source,
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Joins the GPU start-up; `Ok(None)` when `auto` has to fall back to the CPU.
fn join_gpu(
    h: JoinHandle<Result<Warm>>,
    choice: &mut Choice,
    asked: Device,
    timing: &mut Timing,
) -> Result<Option<Warm>> {
    let t = Instant::now();
    let r = h
        .join()
        .map_err(|_| Error::input("the GPU start-up thread panicked"))?;
    timing.gpu_wait_ms = ms_since(t);
    match r {
        Ok(w) => {
            timing.context_ms = w.context_ms;
            timing.module_ms = w.module_ms;
            timing.alloc_ms = w.alloc_ms;
            timing.prime_ms = w.prime_ms;
            Ok(Some(w))
        }
        Err(e) if asked == Device::Auto && e.is_no_device() => {
            *choice = Choice {
                device: Device::Cpu,
                reason: format!("auto: no usable GPU ({e})"),
            };
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

pub fn run(a: NdtArgs) -> Result<()> {
    let t_start = Instant::now();
    if !(a.leaf >= 0.0 && a.leaf.is_finite()) {
        return Err(Error::input(format!(
            "--leaf must be 0 or a positive length in metres, got {}",
            a.leaf
        )));
    }
    if a.hypotheses == 0 || a.hypotheses > MAX_REQUESTS_PER_LAUNCH {
        return Err(Error::input(format!(
            "--hypotheses must lie in 1..={MAX_REQUESTS_PER_LAUNCH}, got {}",
            a.hypotheses
        )));
    }
    let init = match &a.init {
        Some(s) => parse_init(s)?,
        None => Isometry3::identity(),
    };
    let mut params = NdtParams {
        resolution_m: a.resolution,
        search: a.search,
        ..Default::default()
    };
    params.solver.max_iterations = a.max_iters;
    params.validate()?;
    let (spread_m, spread_deg) = a.spread;
    let hyps = hypotheses(&init, a.hypotheses, spread_m, spread_deg, a.seed)?;
    let paths = source_list(&a.source)?;
    let h = a.hypotheses;
    // Sources per chunk: one lockstep batch of at most `batch` alignments when unchained.
    let per_chunk = (a.batch.max(1) / h).clamp(1, paths.len());
    let lockstep = if a.chain { h } else { per_chunk * h };
    let lockstep = lockstep.min(MAX_REQUESTS_PER_LAUNCH);
    let capacity = |points: usize, voxels: usize| GpuCapacity {
        points,
        voxels,
        requests: lockstep,
    };
    let mut timing = Timing::default();
    // A named GPU starts now, overlapping everything up to the first upload.
    let mut gpu_start = (a.device == Device::Gpu)
        .then(|| start_gpu(capacity(1 << 18, 1 << 16), a.search, params.outlier_ratio));

    let target = load(&a.target, a.leaf)?;
    timing.read_ms += target.read_s * 1e3;
    timing.filter_ms += target.filter_s * 1e3;
    let chunks: Vec<Vec<_>> = paths.chunks(per_chunk).map(|c| c.to_vec()).collect();
    // The first source alone tells the cost model the cloud size; a GPU it picks then starts
    // while the rest of the first chunk is read.
    let head = load(&chunks[0][0], a.leaf)?;
    let probes = a.search.offsets().len();
    let work = NdtWork {
        alignments: paths.len() * h,
        lockstep,
        source_points: head.points.len(),
        probes,
    };
    let mut choice = CostModel::default().choose(a.device, &work);
    if choice.is_gpu() && gpu_start.is_none() {
        let pts = head.points.len() * chunks[0].len();
        gpu_start = Some(start_gpu(
            capacity(pts.max(1), (target.points.len() / 4).max(1)),
            a.search,
            params.outlier_ratio,
        ));
    }
    let mut first = vec![head];
    first.extend(load_all(&chunks[0][1..], a.leaf)?);
    for l in &first {
        timing.read_ms += l.read_s * 1e3;
        timing.filter_ms += l.filter_s * 1e3;
    }
    let mut prefetch = Prefetch::start(chunks[1..].to_vec(), a.leaf);

    let t = Instant::now();
    let map = target_map(&target.points, &params)?;
    timing.map_ms = ms_since(t);
    let mut engine = match gpu_start {
        Some(hdl) => match join_gpu(hdl, &mut choice, a.device, &mut timing)? {
            Some(w) => Engine::Gpu {
                pipeline: Box::new(w.pipeline),
            },
            None => Engine::Cpu { map: &map },
        },
        None => Engine::Cpu { map: &map },
    };
    engine.prepare(&map, &mut timing)?;

    let single = paths.len() == 1 && h == 1;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let t_seq = Instant::now();
    let mut chunk = Some(Ok(first));
    let mut index = 0usize;
    let mut prev = init;
    let mut converged = 0usize;
    let mut single_result = None;
    while let Some(loaded) = chunk {
        let loaded: Vec<Loaded> = loaded?;
        for l in &loaded {
            if l.points.is_empty() {
                return Err(Error::input(format!(
                    "NDT source {} has no (finite) points",
                    l.path.display()
                )));
            }
        }
        let groups: Vec<Vec<Isometry3<f64>>> = if a.chain {
            Vec::new()
        } else {
            vec![hyps.clone(); loaded.len()]
        };
        let results: Vec<(Vec<Isometry3<f64>>, Vec<NdtResult>)> = if a.chain {
            let mut v = Vec::with_capacity(loaded.len());
            for l in &loaded {
                let inits = hypotheses(&prev, h, spread_m, spread_deg, a.seed)?;
                let r = engine
                    .align(
                        &[&l.points],
                        std::slice::from_ref(&inits),
                        &params,
                        &mut timing,
                    )?
                    .remove(0);
                let best = best_result(&r).expect("at least one hypothesis");
                prev = r[best].t_target_source;
                v.push((inits, r));
            }
            v
        } else {
            let clouds: Vec<&[[f32; 3]]> = loaded.iter().map(|l| l.points.as_slice()).collect();
            let r = engine.align(&clouds, &groups, &params, &mut timing)?;
            groups.into_iter().zip(r).collect()
        };
        for (l, (inits, r)) in loaded.iter().zip(results) {
            let best = best_result(&r).expect("at least one hypothesis");
            converged += usize::from(r[best].stop.converged());
            if single {
                single_result = Some((r[best].clone(), l.raw, l.points.len()));
            } else {
                write_source(&mut out, &a, index, l, &inits, &r, best, &choice)?;
            }
            index += 1;
        }
        let t = Instant::now();
        chunk = prefetch.next_chunk();
        timing.input_wait_ms += ms_since(t);
    }
    let seq_s = t_seq.elapsed().as_secs_f64();
    timing.total_ms = ms_since(t_start);
    drop(prefetch);
    let total = paths.len() * h;
    if let Some((r, source_raw, source_n)) = single_result {
        if a.json {
            writeln!(
                out,
                "{{{},\"target_points\":{},\"source_points_raw\":{},\"target_points_raw\":{},\
                 \"search\":\"{}\",\"align_seconds\":{},\"load_seconds\":{},{},\"timing\":{}}}",
                result_fields(&r),
                target.points.len(),
                source_raw,
                target.raw,
                a.search.name(),
                num(timing.align_ms() * 1e-3),
                num((timing.read_ms + timing.filter_ms) * 1e-3),
                device_fields(&choice),
                timing.json()
            )
            .map_err(wio)?;
        } else {
            out.flush().map_err(wio)?;
            print_result(&r);
            println!(
                "{}",
                points_line(
                    target.raw,
                    target.points.len(),
                    source_raw,
                    source_n,
                    a.search
                )
            );
            println!("device: {} ({})", choice.device, choice.reason);
            println!("{}", timing.text(choice.is_gpu()));
        }
    } else if a.json {
        writeln!(
            out,
            "{{\"summary\":{{\"sources\":{},\"alignments\":{},\"converged_sources\":{},{},\
             \"sequence_seconds\":{},\"alignments_per_second\":{},\"timing\":{}}}}}",
            paths.len(),
            total,
            converged,
            device_fields(&choice),
            num(seq_s),
            num(total as f64 / seq_s),
            timing.json()
        )
        .map_err(wio)?;
    } else {
        writeln!(
            out,
            "{} sources ({} converged), {} alignments in {:.1} ms: {:.0} alignments/s\n\
             device: {} ({})\n{}",
            paths.len(),
            converged,
            total,
            seq_s * 1e3,
            total as f64 / seq_s,
            choice.device,
            choice.reason,
            timing.text(choice.is_gpu())
        )
        .map_err(wio)?;
    }
    out.flush().map_err(wio)?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn write_source(
    out: &mut impl Write,
    a: &NdtArgs,
    index: usize,
    l: &Loaded,
    inits: &[Isometry3<f64>],
    r: &[NdtResult],
    best: usize,
    choice: &Choice,
) -> Result<()> {
    let name = l.path.display().to_string();
    if a.json {
        let hyp = if a.hypotheses > 1 {
            format!(
                ",\"best\":{best},\"hypotheses\":{}",
                hypotheses_json(inits, r)
            )
        } else {
            String::new()
        };
        writeln!(
            out,
            "{{\"index\":{index},\"source\":{},{},\"source_points_raw\":{},\"device\":\"{}\"{hyp}}}",
            jstr(&name),
            result_fields(&r[best]),
            l.raw,
            choice.device
        ).map_err(wio)?;
    } else {
        let extra = if a.hypotheses > 1 {
            let ok = r.iter().filter(|x| x.stop.converged()).count();
            format!(" (best of {} hypotheses: #{best}, {ok} converged)", r.len())
        } else {
            String::new()
        };
        writeln!(out, "{}", result_line(index, &name, &r[best], &extra)).map_err(wio)?;
    }
    Ok(())
}
