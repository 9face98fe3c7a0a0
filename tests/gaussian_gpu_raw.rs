//! `RawGaussianKernels` (the Gaussian kernels on caller-owned device memory and streams, with the
//! Gaussians prepared on the device by `gaussian_prepare`) against `GpuGaussianField` (host
//! preparation, own buffers, the subtract-form forward of the raw layer): the same kernels on the
//! same plan, so values and both gradients must be bit-identical, which holds only if the device preparation rounds exactly as the host's
//! (including the f32 compensation flags on badly conditioned Gaussians). Plus the raw layer's
//! checks: wrong lengths, misaligned addresses and bad options are errors before any launch.

mod common;
mod gaussian_support;

use cudarc::driver::{CudaStream, DevicePtr};
use gaussian_support::device::*;
use gaussian_support::*;
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::gpu::{stage_prepared, BackwardKind, ForwardKind};
use ptxflow::gaussian::layout;
use ptxflow::gaussian::{GaussianFieldOps, GpuReal, RawGaussianKernels, RawSlice};
use ptxflow::runtime::{DeviceBuffer, Gpu};
use ptxflow::Error;
use std::sync::Arc;

struct Buf<T: GpuReal> {
    buf: DeviceBuffer<T>,
    len: usize,
}

impl<T: GpuReal> Buf<T> {
    fn zeros(stream: &Arc<CudaStream>, len: usize) -> Self {
        let mut buf = DeviceBuffer::zeros(stream, len.max(1), "raw test buffer").unwrap();
        buf.set_len(len.max(1)).unwrap();
        Buf { buf, len }
    }
    fn from(stream: &Arc<CudaStream>, data: &[T]) -> Self {
        let mut b = Self::zeros(stream, data.len());
        if !data.is_empty() {
            b.buf.upload(stream, data).unwrap();
        }
        b.buf.set_len(data.len().max(1)).unwrap();
        b
    }
    fn raw(&self, stream: &Arc<CudaStream>) -> RawSlice {
        let (ptr, _sync) = self.buf.slice().device_ptr(stream);
        RawSlice { ptr, len: self.len }
    }
    fn host(&self, stream: &Arc<CudaStream>) -> Vec<T> {
        let mut v = self.buf.to_vec(stream).unwrap();
        v.truncate(self.len);
        v
    }
}

/// What the host stages for `gaussians` (as `GpuGaussianField` does): prepared layout and
/// compensation records, padded to `n_pad`.
fn host_staging<T: GpuReal>(gaussians: &[T], normalised: bool, n_pad: usize) -> (Vec<T>, Vec<T>) {
    let mut prepared = Vec::new();
    let eps = T::from_f64(options(normalised).diag_eps);
    layout::prepare(gaussians, normalised, eps, &mut prepared).unwrap();
    let (mut prep, mut comp) = (Vec::new(), Vec::new());
    stage_prepared(&prepared, n_pad, &mut prep, &mut comp);
    (prep, comp)
}

/// Panics naming the first entry where `got` and `want` differ in bits (and how many do).
fn same_bits<T: GpuReal>(what: &str, got: &[T], want: &[T], stride: usize) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let differ: Vec<usize> = (0..got.len())
        .filter(|&i| got[i].to_f64().to_bits() != want[i].to_f64().to_bits())
        .collect();
    if let Some(&i) = differ.first() {
        panic!(
            "{what}: {} of {} entries differ; first at {i} (record {}, slot {}): got {:e}, want {:e}",
            differ.len(),
            got.len(),
            i / stride,
            i % stride,
            got[i].to_f64(),
            want[i].to_f64()
        );
    }
}

/// (values, grad_points, grad_gaussians) through the raw kernels on the device's work stream;
/// checks the device-prepared layout against the host's first.
fn raw_run<T: GpuReal>(
    gpu: &Arc<Gpu>,
    normalised: bool,
    gaussians: &[T],
    points: &[T],
    grad: &[T],
    what: &str,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let k = RawGaussianKernels::<T>::new(gpu.clone()).unwrap();
    let s = gpu.stream().clone();
    let (n, b) = (gaussians.len() / 10, points.len() / 3);
    let plan = k.plan(n, b).unwrap();
    let packed = Buf::from(&s, gaussians);
    let pts = Buf::from(&s, points);
    let gv = Buf::from(&s, grad);
    let prep = Buf::<T>::zeros(&s, plan.prep_len);
    let comp = Buf::<T>::zeros(&s, plan.comp_len);
    let scratch = Buf::<T>::zeros(&s, plan.forward_scratch_len);
    let values = Buf::<T>::zeros(&s, b);
    let pp = Buf::<T>::zeros(&s, plan.partial_points_len);
    let pg = Buf::<T>::zeros(&s, plan.partial_gauss_len);
    let gp = Buf::<T>::zeros(&s, 3 * b);
    let gg = Buf::<T>::zeros(&s, 10 * n);
    let cu = s.cu_stream();
    let eps = options(normalised).diag_eps;
    // SAFETY: every slice is a live DeviceBuffer of this device with at least the stated
    // length, used only on the device's work stream, which is synchronised before they drop.
    unsafe {
        let (p, c) = (prep.raw(&s), comp.raw(&s));
        k.prepare(cu, &plan, normalised, eps, packed.raw(&s), p, c)
            .unwrap();
        s.synchronize().unwrap();
        let (want_prep, want_comp) = host_staging(gaussians, normalised, plan.n_pad);
        same_bits(
            &format!("{what}: prepared layout"),
            &prep.host(&s),
            &want_prep,
            12,
        );
        // f64 has no compensation (the flag is 0 either way): compare the f32 records only.
        if T::NAME == "f32" {
            same_bits(
                &format!("{what}: compensation records"),
                &comp.host(&s),
                &want_comp,
                8,
            );
        }
        k.forward(cu, &plan, p, pts.raw(&s), scratch.raw(&s), values.raw(&s))
            .unwrap();
        k.backward(
            cu,
            &plan,
            normalised,
            p,
            c,
            pts.raw(&s),
            gv.raw(&s),
            pp.raw(&s),
            pg.raw(&s),
            gp.raw(&s),
            gg.raw(&s),
        )
        .unwrap();
    }
    s.synchronize().unwrap();
    (values.host(&s), gp.host(&s), gg.host(&s))
}

fn same_as_field<T: GpuReal>(gpu: &Arc<Gpu>) {
    let mut problems = vec![
        random_problem(1, 1, 1),
        random_problem(7, 33, 2),
        well_conditioned(700, 333, 3),
        badly_conditioned(500, 257, 4),
    ];
    if !sanitizing() {
        problems.push(random_problem(3000, 2049, 5));
    }
    for p in &problems {
        for normalised in [false, true] {
            let g: Vec<T> = convert(&p.gaussians);
            let x: Vec<T> = convert(&p.points);
            let b = x.len() / 3;
            let grad: Vec<T> = (0..b)
                .map(|i| T::from_f64(((i * 7919) % 13) as f64 / 6.5 - 1.0))
                .collect();
            let mut field = gpu_field::<T>(gpu, normalised);
            // The raw layer runs the subtract-form forward (`gaussian_forward_<T>`) and the unit
            // backward (`gaussian_backward_<T>`); the field's f32 defaults are the expanded
            // solve and the points-in-lanes backward, so it is pinned to the same kernels here.
            field.set_forward_kind(ForwardKind::Subtract);
            field.set_backward_kind(BackwardKind::Unit);
            field.set_gaussians(&g).unwrap();
            let values = field.forward(&x).unwrap().to_vec();
            let grads = field.backward(&grad).unwrap();
            let what = format!("{} {} normalised={normalised}", p.name, T::NAME);
            let (v, gp, gg) = raw_run(gpu, normalised, &g, &x, &grad, &what);
            same_bits(&format!("{what}: values"), &v, &values, 1);
            same_bits(&format!("{what}: dLoss/dx"), &gp, grads.points, 3);
            same_bits(
                &format!("{what}: packed gradient"),
                &gg,
                grads.gaussians,
                10,
            );
        }
    }
}

#[test]
fn raw_kernels_match_the_gpu_field_bit_for_bit() {
    let Some(gpu) = common::gpu_or_skip("raw_kernels_match_the_gpu_field_bit_for_bit") else {
        return;
    };
    same_as_field::<f32>(&gpu);
    same_as_field::<f64>(&gpu);
}

#[test]
fn raw_kernels_check_lengths_alignment_and_options() {
    let Some(gpu) = common::gpu_or_skip("raw_kernels_check_lengths_alignment_and_options") else {
        return;
    };
    let k = RawGaussianKernels::<f32>::new(gpu.clone()).unwrap();
    let s = gpu.stream().clone();
    let plan = k.plan(5, 9).unwrap();
    let packed = Buf::<f32>::zeros(&s, 50);
    let prep = Buf::<f32>::zeros(&s, plan.prep_len);
    let comp = Buf::<f32>::zeros(&s, plan.comp_len);
    let short = Buf::<f32>::zeros(&s, plan.prep_len - 1);
    let cu = s.cu_stream();
    // SAFETY: every call below fails its checks before launching anything.
    unsafe {
        let (pk, p, c) = (packed.raw(&s), prep.raw(&s), comp.raw(&s));
        let e = k.prepare(cu, &plan, false, 1e-6, pk, short.raw(&s), c);
        assert!(matches!(e, Err(Error::Shape { .. })), "{e:?}");
        let odd = RawSlice {
            ptr: pk.ptr + 4,
            len: 50,
        };
        let e = k.prepare(cu, &plan, false, 1e-6, odd, p, c);
        assert!(matches!(e, Err(Error::Input { .. })), "{e:?}");
        let e = k.prepare(cu, &plan, false, -1.0, pk, p, c);
        assert!(matches!(e, Err(Error::Input { .. })), "{e:?}");
        let e = k.forward(cu, &plan, p, pk, RawSlice { ptr: 0, len: 0 }, c);
        assert!(matches!(e, Err(Error::Shape { .. })), "{e:?}");
    }
    s.synchronize().unwrap();
}
