//! The phase split of a split batch (two groups in flight, `pipeline/split.rs`): every group
//! round is bracketed by a pair of CUDA events on the pipeline's stream (recorded just before
//! the request copy and just after the launch), all timed against one event recorded when the
//! batch starts, so the report has each round's device interval (copy + kernel, plus any launch
//! latency the host adds while the stream waits), the device's idle gaps between rounds, and on
//! the host the time spent submitting, waiting for a group, and feeding the solvers (from a
//! group's result to its next submit).

use cudarc::driver::{sys, CudaEvent};
use ptxflow::ndt::*;
use ptxflow::Result;
use std::time::Instant;

/// One group round as the wrapper saw it.
struct GroupRound {
    group: usize,
    requests: usize,
    events: (CudaEvent, CudaEvent),
    /// Host seconds: inside `submit`, waiting in `complete`, feeding since the previous
    /// `complete` of the group returned.
    submit_s: f64,
    wait_s: f64,
    feed_s: f64,
}

/// Wraps the pipeline's split evaluator and records every group round.
pub struct TimedSplit<'a> {
    pub pipe: &'a mut GpuDerivativePipeline,
    origin: CudaEvent,
    pool: Vec<(CudaEvent, CudaEvent)>,
    rounds: Vec<GroupRound>,
    /// Each group's round in flight (index into `rounds`) and when its last `complete` returned.
    open: [Option<usize>; 2],
    completed_at: [Option<Instant>; 2],
}

fn event(pipe: &GpuDerivativePipeline) -> CudaEvent {
    pipe.gpu()
        .stream()
        .context()
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .expect("cuEventCreate")
}

impl<'a> TimedSplit<'a> {
    /// Creates the events up front (`rounds` group rounds at most are timed).
    pub fn new(pipe: &'a mut GpuDerivativePipeline, rounds: usize) -> Self {
        let origin = event(pipe);
        let pool = (0..rounds).map(|_| (event(pipe), event(pipe))).collect();
        TimedSplit {
            pipe,
            origin,
            pool,
            rounds: Vec::new(),
            open: [None, None],
            completed_at: [None, None],
        }
    }

    /// Marks the start of the batch on the device timeline.
    fn mark_origin(&mut self) {
        self.origin
            .record(self.pipe.gpu().stream())
            .expect("cuEventRecord");
    }

    /// Prints the report under `what`; `wall` is the batch's wall time.
    fn report(&self, what: &str, wall: f64) {
        let ms = |a: &CudaEvent, b: &CudaEvent| f64::from(a.elapsed_ms(b).expect("elapsed")) * 1e3;
        let mut busy = 0.0;
        let mut idle = 0.0;
        let mut last_end = 0.0f64;
        let (mut submit, mut wait, mut feed) = (0.0, 0.0, 0.0);
        let mut per = Vec::new();
        let mut groups_busy = [0.0f64; 2];
        for r in &self.rounds {
            let start = ms(&self.origin, &r.events.0);
            let end = ms(&self.origin, &r.events.1);
            let gap = (start - last_end).max(0.0);
            busy += end - start;
            groups_busy[r.group] += end - start;
            idle += gap;
            last_end = end;
            submit += r.submit_s;
            wait += r.wait_s;
            feed += r.feed_s;
            per.push(format!(
                "{}:{}:{:.1}/{:.1}/{:.1}",
                r.group,
                r.requests,
                end - start,
                gap,
                r.feed_s * 1e6
            ));
        }
        println!(
            "PHASES {what}: wall {:.1} us; {} group rounds; device busy {busy:.1} us (group 0 {:.1}, group 1 {:.1}), device idle between rounds {idle:.1} us, device end {last_end:.1} us; host: submit {:.1} us, waiting for a group {:.1} us, feeding solvers {:.1} us",
            wall * 1e6,
            self.rounds.len(),
            groups_busy[0],
            groups_busy[1],
            submit * 1e6,
            wait * 1e6,
            feed * 1e6,
        );
        println!(
            "PHASES {what} group rounds (group:requests:device us/idle before us/host feed us): {}",
            per.join(" ")
        );
    }
}

impl SplitLinearize for TimedSplit<'_> {
    fn merge_tail(&self) -> usize {
        SplitLinearize::merge_tail(&*self.pipe)
    }

    fn finish_split(&mut self) -> Result<()> {
        SplitLinearize::finish_split(&mut *self.pipe)
    }

    fn submit(&mut self, group: usize, requests: &[LinearizeRequest]) -> Result<()> {
        let t = Instant::now();
        let feed_s = self.completed_at[group].map_or(0.0, |c| (t - c).as_secs_f64());
        let events = self.pool.pop().expect("event pool large enough");
        let s = self.pipe.group_stream(group).clone();
        events.0.record(&s).expect("cuEventRecord");
        SplitLinearize::submit(&mut *self.pipe, group, requests)?;
        events.1.record(&s).expect("cuEventRecord");
        self.open[group] = Some(self.rounds.len());
        self.rounds.push(GroupRound {
            group,
            requests: requests.len(),
            events,
            submit_s: t.elapsed().as_secs_f64(),
            wait_s: 0.0,
            feed_s,
        });
        Ok(())
    }

    fn complete(&mut self, group: usize) -> Result<Vec<Linearization>> {
        let t = Instant::now();
        let out = SplitLinearize::complete(&mut *self.pipe, group)?;
        let now = Instant::now();
        if let Some(k) = self.open[group].take() {
            self.rounds[k].wait_s = (now - t).as_secs_f64();
        }
        self.completed_at[group] = Some(now);
        Ok(out)
    }
}

/// A [`Linearize`] whose split batches go through a [`TimedSplit`].
pub struct SplitTimed<'a>(pub TimedSplit<'a>);

impl Linearize for SplitTimed<'_> {
    fn source_count(&self) -> usize {
        self.0.pipe.source_count()
    }

    fn source_len(&self, source: usize) -> usize {
        self.0.pipe.source_len(source)
    }

    fn linearize(&mut self, requests: &[LinearizeRequest]) -> Result<Vec<Linearization>> {
        self.0.pipe.linearize(requests)
    }

    fn split(&mut self, jobs: usize) -> Option<&mut dyn SplitLinearize> {
        self.0.pipe.split(jobs)?;
        self.0.mark_origin();
        Some(&mut self.0)
    }
}

/// Runs `f` (a batch) with its split rounds timed and prints the report under `what`.
pub fn report_split<T>(
    what: &str,
    pipe: &mut GpuDerivativePipeline,
    f: impl FnOnce(&mut SplitTimed) -> T,
) -> T {
    let mut timed = SplitTimed(TimedSplit::new(pipe, 256));
    let t = Instant::now();
    let out = f(&mut timed);
    let wall = t.elapsed().as_secs_f64();
    if timed.0.rounds.is_empty() {
        println!("PHASES {what}: wall {:.1} us; not split", wall * 1e6);
    } else {
        timed.0.report(what, wall);
    }
    out
}
