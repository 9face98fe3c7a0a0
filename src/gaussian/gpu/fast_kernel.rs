//! [`FastKernel`]: the loaded expanded forward (`gaussian_forward_fast_f32` or a
//! `PTXFLOW_GAUSS_FAST` variant), its plan and its launch (records: `super::fast`).

use super::fast::{options, plan};
use super::fast_schedule;
use super::launch::{config, ForwardPlan, Problem};
use crate::kernels::gaussian::forward::BLOCK;
use crate::kernels::gaussian::forward_fast::{self, Schedule};
use crate::kernels::KernelId;
use crate::runtime::{ArgElem, DeviceBuffer, Gpu, LoadedKernel};
use crate::Result;
use cudarc::driver::{CudaSlice, CudaStream, CudaViewMut, DeviceRepr};
use std::sync::{Arc, Mutex};

/// The loaded expanded kernel (built-in, or the `PTXFLOW_GAUSS_FAST` variant, built once per
/// field), with its resident-block capacity and points per block.
#[derive(Clone, Debug)]
pub struct FastKernel {
    /// The kernel.
    pub kernel: LoadedKernel,
    /// Resident blocks per SM times the SM count.
    pub slots: u32,
    /// Points per block (the forward plan's unit).
    pub points_per_block: u32,
    /// Resident waves the forward plan aims at ([`super::fast::waves`]).
    pub waves: u32,
    /// The kernel adds the chunk rows itself (`forward_fast::Options::fused`): no
    /// `gaussian_reduce_rows` launch after it.
    pub fused: bool,
    /// The chunk schedule (`forward_fast::Options::schedule`), if any.
    pub schedule: Option<Schedule>,
    /// The fused row sum's counters and the schedule's chunk starts on the device.
    tables: Arc<Tables>,
}

/// [`FastKernel`]'s device tables (shared by its clones, all on the field's stream): the fused
/// row sum's arrival count per point block (zero between launches; grown on demand,
/// zero-filled on the stream) and the chunk starts of the last scheduled plan.
#[derive(Default)]
struct Tables(Mutex<TableBufs>);

#[derive(Default)]
struct TableBufs {
    counters: Option<DeviceBuffer<u32>>,
    /// The starts (host copy, to compare) and their device copy.
    starts: Option<(Vec<u32>, DeviceBuffer<u32>)>,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let counters = t.counters.as_ref().map(|b| b.capacity());
        let starts = t.starts.as_ref().map(|s| s.0.len());
        write!(f, "Tables(counters {counters:?}, starts {starts:?})")
    }
}

impl FastKernel {
    /// Loads the kernel `id` (`gaussian_forward_fast_f32`) with [`options`].
    ///
    /// Errors: loading the module or querying its occupancy failed.
    pub fn load(gpu: &Gpu, id: KernelId) -> Result<Self> {
        let o = options();
        let resident = |kernel: LoadedKernel| -> Result<(LoadedKernel, u32)> {
            let per_sm = kernel
                .function()
                .occupancy_max_active_blocks_per_multiprocessor(BLOCK, 0, None)
                .map_err(crate::Error::driver(
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                ))?;
            Ok((kernel, per_sm))
        };
        let default = forward_fast::Options::default();
        let (kernel, per_sm) = if o == default {
            resident(gpu.kernel(id)?)?
        } else {
            let module = forward_fast::build(crate::ptx::Target::Sm75, o);
            // Tiles beyond one of each form need more than the default shared-memory carveout.
            let one_tile = forward_fast::Options {
                lazy: false,
                tile_blocks: 1,
                ..default
            };
            if o.carveout || o.shared_bytes() > one_tile.shared_bytes() {
                super::fast_backward::load_with_carveout(gpu, id, Some((module, id.name())), BLOCK)?
            } else {
                resident(gpu.load_module(&module, id.name())?)?
            }
        };
        Ok(FastKernel {
            kernel,
            slots: per_sm.max(1) * gpu.facts().sm_count.max(1),
            points_per_block: BLOCK * o.points_per_thread,
            waves: super::fast::waves(),
            fused: o.fused,
            schedule: o.schedule,
            tables: Arc::default(),
        })
    }

    /// The plan of this kernel for n_pad Gaussians and b points: [`plan`] with its slots, waves
    /// and points per block, and the chunk schedule where it has one.
    pub fn plan(&self, n_pad: u32, b: u32) -> ForwardPlan {
        let uniform = self.uniform_plan(n_pad, b);
        match self.schedule {
            Some(s) => fast_schedule::plan(n_pad, self.slots, s, uniform).0,
            None => uniform,
        }
    }

    fn uniform_plan(&self, n_pad: u32, b: u32) -> ForwardPlan {
        plan(n_pad, b, self.slots, self.waves, self.points_per_block)
    }

    /// Enqueues the kernel on `stream`, writing `plan.chunks` rows of b partial sums to `out`
    /// (`plan` made with [`Self::points_per_block`]); `fast` holds the records of [`super::fast::stage`] for
    /// the same `n_pad` Gaussians and `origin` its origin. A [`Self::fused`] kernel with
    /// several chunks also writes their sum to `values` (b values; required then).
    ///
    /// Errors: the launch failed (or its arguments do not fit the kernel's contract); a fused
    /// kernel with several chunks and no `values`; allocating the counters failed.
    #[allow(clippy::too_many_arguments)]
    pub fn forward<T: DeviceRepr + ArgElem>(
        &self,
        stream: &Arc<CudaStream>,
        p: &Problem<'_, T>,
        fast: &CudaSlice<T>,
        origin: &[T; 3],
        plan: &ForwardPlan,
        out: &mut CudaViewMut<'_, T>,
        values: Option<&mut CudaViewMut<'_, T>>,
    ) -> Result<()> {
        let cfg = config((plan.point_blocks, plan.chunks), BLOCK)?;
        let mut tables = self.tables.0.lock().unwrap_or_else(|e| e.into_inner());
        let TableBufs { counters, starts } = &mut *tables;
        if let Some(s) = self.schedule {
            let (splan, st) =
                fast_schedule::plan(p.n_pad, self.slots, s, self.uniform_plan(p.n_pad, p.b));
            if splan != *plan {
                return Err(crate::Error::input(
                    "gaussian scheduled forward: the plan is not the kernel's own",
                ));
            }
            if starts.as_ref().is_none_or(|(v, _)| *v != st) {
                let buf = DeviceBuffer::from_host(stream, &st, "gaussian forward chunk starts")?;
                *starts = Some((st, buf));
            }
        }
        if self.fused {
            if plan.chunks > 1 && values.is_none() {
                return Err(crate::Error::input(
                    "gaussian fused forward: several chunks need the values buffer",
                ));
            }
            let need = plan.point_blocks as usize;
            if counters.as_ref().is_none_or(|c| c.capacity() < need) {
                *counters = Some(DeviceBuffer::zeros(
                    stream,
                    need,
                    "gaussian forward counters",
                )?);
            }
        }
        // SAFETY: (argument types and the .reqntid block are checked against the kernel's
        // contract) prep and fast hold n_pad records each (n_pad and chunk_len multiples of
        // CHUNK_ALIGN, as the kernel requires); points 3b scalars; out chunks * b (checked by
        // the caller); the kernel reads and writes only i < b. Fused: values b scalars (only
        // written with several chunks; with one, the unused pointer is `fast`'s), counters
        // point_blocks words, zero between launches (each launch's last arrival resets its
        // word), all on this stream.
        unsafe {
            let mut l = self.kernel.launch(stream, cfg);
            l.arg(p.prep)
                .arg(fast)
                .arg(&p.n_pad)
                .arg(&plan.chunk_len)
                .arg(p.points)
                .arg(&p.b)
                .arg(out)
                .arg(&origin[0])
                .arg(&origin[1])
                .arg(&origin[2]);
            if let Some(c) = counters.as_ref().filter(|_| self.fused) {
                match values {
                    Some(v) => l.arg(v),
                    None => l.arg(fast),
                };
                l.arg(c.slice());
            }
            if let Some((_, st)) = starts.as_ref().filter(|_| self.schedule.is_some()) {
                l.arg(st.slice());
            }
            l.launch()
        }
    }
}
