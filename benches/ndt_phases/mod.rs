//! `PTXFLOW_NDT_PHASES=1 cargo bench --bench ndt`: where the time of a GPU alignment and of the
//! 256-hypothesis batch goes, round by round (printed as `PHASES` lines instead of the criterion
//! rows). Each [`Linearize::linearize`] call is timed by wall clock and by a pair of CUDA events
//! on the pipeline's stream around it (device time from the first launch to the completion of
//! the round, so launch latency is included but no host work after the synchronization); the
//! solver's host time is the alignment's wall time minus the rounds' wall time.
//! `PTXFLOW_NDT_PHASES=batch` runs only the batch (once, for `ncu --launch-count`). With the
//! evaluation server (`PTXFLOW_NDT_SERVER=1`) an alignment's rounds have wall times only.

pub mod split;

use ptxflow::ndt::*;
use ptxflow::runtime::GpuTimer;
use ptxflow::Result;
use std::time::Instant;

/// One round: requests, wall seconds, device seconds (events).
pub type Round = (usize, f64, f64);

/// A pipeline whose rounds are timed.
pub struct Timed<'a> {
    pub pipe: &'a mut GpuDerivativePipeline,
    pub timer: GpuTimer,
    pub rounds: Vec<Round>,
}

impl Linearize for Timed<'_> {
    fn source_count(&self) -> usize {
        self.pipe.source_count()
    }

    fn source_len(&self, source: usize) -> usize {
        self.pipe.source_len(source)
    }

    fn linearize(&mut self, requests: &[LinearizeRequest]) -> Result<Vec<Linearization>> {
        if self.pipe.server_running() {
            // Events would queue behind the persistent kernel: wall time only (device time
            // reported as 0).
            let t = Instant::now();
            let out = self.pipe.linearize(requests)?;
            self.rounds
                .push((requests.len(), t.elapsed().as_secs_f64(), 0.0));
            return Ok(out);
        }
        let s = self.pipe.gpu().stream().clone();
        let t = Instant::now();
        self.timer.start(&s)?;
        let out = self.pipe.linearize(requests)?;
        let device = self.timer.stop(&s)?;
        self.rounds
            .push((requests.len(), t.elapsed().as_secs_f64(), device));
        Ok(out)
    }

    /// Split batches (the default for batches of 64 or more; `PTXFLOW_NDT_SPLIT=0` turns them
    /// off) go straight to the pipeline: no rounds are timed, and the report says so.
    fn split(&mut self, jobs: usize) -> Option<&mut dyn SplitLinearize> {
        self.pipe.split(jobs)
    }

    /// Starts the evaluation server (`PTXFLOW_NDT_SERVER=1`) for a single alignment.
    fn start_alignment(&mut self, jobs: usize) -> Result<()> {
        self.pipe.start_alignment(jobs)
    }

    fn finish_alignment(&mut self) -> Result<()> {
        self.pipe.finish_alignment()
    }
}

/// Runs `f` on a timed wrapper of `pipe` and prints the phase split under `what`.
pub fn report<T>(
    what: &str,
    pipe: &mut GpuDerivativePipeline,
    f: impl FnOnce(&mut Timed) -> T,
) -> T {
    let timer = GpuTimer::new(pipe.gpu().stream()).expect("events");
    let mut timed = Timed {
        pipe,
        timer,
        rounds: Vec::new(),
    };
    let t = Instant::now();
    let out = f(&mut timed);
    let wall = t.elapsed().as_secs_f64();
    let rounds = &timed.rounds;
    let round_wall: f64 = rounds.iter().map(|r| r.1).sum();
    let device: f64 = rounds.iter().map(|r| r.2).sum();
    let requests: usize = rounds.iter().map(|r| r.0).sum();
    if rounds.is_empty() {
        println!(
            "PHASES {what}: wall {:.1} us; split batch (two groups in flight), rounds not timed: \
             PTXFLOW_NDT_SPLIT=0 gives the round-by-round split of the lockstep batch",
            wall * 1e6
        );
        return out;
    }
    println!(
        "PHASES {what}: wall {:.1} us; {} rounds, {requests} evaluations; rounds' wall {:.1} us, \
         device (events) {:.1} us; solver + bookkeeping on the host {:.1} us",
        wall * 1e6,
        rounds.len(),
        round_wall * 1e6,
        device * 1e6,
        (wall - round_wall) * 1e6
    );
    let per: Vec<String> = rounds
        .iter()
        .map(|r| format!("{}:{:.1}/{:.1}", r.0, r.1 * 1e6, r.2 * 1e6))
        .collect();
    println!(
        "PHASES {what} rounds (requests:wall us/device us): {}",
        per.join(" ")
    );
    out
}
