//! Where a `ptxflow ndt` run spent its time, in milliseconds, as `--json` reports it.
//!
//! The GPU start-up (context, module, buffers, priming launch) runs on its own thread while the
//! main thread reads and downsamples the clouds and builds the map; `gpu_wait_ms` is the part of
//! it the main thread had to wait for. `align_ms` is map build + uploads + solve: the alignment
//! itself, context creation excluded.

use ptxflow::runtime::jit_stats;

#[derive(Clone, Debug, Default)]
pub struct Timing {
    /// Reading the files (target and sources), summed over files.
    pub read_ms: f64,
    /// Voxel-grid downsampling, summed over files.
    pub filter_ms: f64,
    /// Main thread waiting for sources read in the background (sequences only).
    pub input_wait_ms: f64,
    /// CUDA context creation (device open).
    pub context_ms: f64,
    /// Loading the kernel module (JIT or JIT cache).
    pub module_ms: f64,
    /// Allocating the pipeline's device and pinned buffers.
    pub alloc_ms: f64,
    /// The priming launch.
    pub prime_ms: f64,
    /// Main thread waiting for the GPU start-up.
    pub gpu_wait_ms: f64,
    /// Building the target's voxel map (CPU).
    pub map_ms: f64,
    /// Host-to-device uploads of the map and the sources.
    pub upload_ms: f64,
    /// Newton iterations (all evaluations).
    pub solve_ms: f64,
    /// Process start (first line of `run`) to the end of the last alignment.
    pub total_ms: f64,
}

impl Timing {
    /// Map build, uploads and solve: the alignment, context creation excluded.
    pub fn align_ms(&self) -> f64 {
        self.map_ms + self.upload_ms + self.solve_ms
    }

    pub fn json(&self) -> String {
        let j = jit_stats();
        let f = |v: f64| format!("{:.3}", v);
        format!(
            "{{\"read_ms\":{},\"filter_ms\":{},\"input_wait_ms\":{},\"context_ms\":{},\
             \"module_ms\":{},\"alloc_ms\":{},\"prime_ms\":{},\"gpu_wait_ms\":{},\"map_ms\":{},\
             \"upload_ms\":{},\"solve_ms\":{},\"align_ms\":{},\"total_ms\":{},\
             \"jit_cache_hits\":{},\"jit_cache_misses\":{}}}",
            f(self.read_ms),
            f(self.filter_ms),
            f(self.input_wait_ms),
            f(self.context_ms),
            f(self.module_ms),
            f(self.alloc_ms),
            f(self.prime_ms),
            f(self.gpu_wait_ms),
            f(self.map_ms),
            f(self.upload_ms),
            f(self.solve_ms),
            f(self.align_ms()),
            f(self.total_ms),
            j.hits,
            j.misses
        )
    }

    /// One line for the text output.
    pub fn text(&self, gpu: bool) -> String {
        let mut s = format!(
            "time: align {:.1} ms (map {:.1}, upload {:.1}, solve {:.1}), read {:.1} ms, filter {:.1} ms",
            self.align_ms(),
            self.map_ms,
            self.upload_ms,
            self.solve_ms,
            self.read_ms,
            self.filter_ms
        );
        if gpu {
            s.push_str(&format!(
                ", GPU start-up {:.1} ms (context {:.1}, module {:.1}, buffers {:.1}, prime {:.1}; waited {:.1})",
                self.context_ms + self.module_ms + self.alloc_ms + self.prime_ms,
                self.context_ms,
                self.module_ms,
                self.alloc_ms,
                self.prime_ms,
                self.gpu_wait_ms
            ));
        }
        s.push_str(&format!(", total {:.1} ms", self.total_ms));
        s
    }
}
