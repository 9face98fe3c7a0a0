//! [`RingSteps`]: the slot schedule both overlapped ring loops follow (compress in `pipeline`,
//! decode in `decode_ring`). Each step one side submits the batch staged in the previous step and
//! drains the oldest submitted slot, while the other side stages the next batch into a free slot;
//! the schedule says which slots a step works on and keeps the ring's order.

use super::tuning::Phases;
use std::collections::VecDeque;

/// One step's work: `fill` the slot to stage the next batch into, `drain` the oldest submitted
/// slot (when the next step would find no free slot, and at the end), `submit` the batch staged
/// last step (its slot and what was staged).
#[derive(Clone, Copy)]
pub(super) struct Step<P> {
    pub(super) fill: Option<usize>,
    pub(super) drain: Option<usize>,
    pub(super) submit: Option<(usize, P)>,
}

/// The schedule of a ring of `slots` slots; `P` describes a staged batch.
pub(super) struct RingSteps<P> {
    slots: usize,
    /// Submitted slots, oldest first.
    in_flight: VecDeque<usize>,
    /// The batch staged last step (slot, batch), not yet submitted.
    pending: Option<(usize, P)>,
    next: usize,
    ended: bool,
}

impl<P: Copy> RingSteps<P> {
    pub(super) fn new(slots: usize) -> Self {
        RingSteps {
            slots,
            in_flight: VecDeque::new(),
            pending: None,
            next: 0,
            ended: false,
        }
    }

    /// The next step, or `None` when the input has ended and every batch is drained.
    pub(super) fn step(&self) -> Option<Step<P>> {
        let busy = self.in_flight.len() + usize::from(self.pending.is_some());
        let fill = (!self.ended && busy < self.slots).then_some(self.next);
        let drain = if self.ended || busy + 1 >= self.slots {
            self.in_flight.front().copied()
        } else {
            None
        };
        (fill.is_some() || self.pending.is_some() || drain.is_some()).then_some(Step {
            fill,
            drain,
            submit: self.pending,
        })
    }

    /// After the step ran (successfully or not): its submitted batch is in flight (or failed with
    /// the ring about to be reset), its drained slot is no longer.
    pub(super) fn ran(&mut self, step: &Step<P>) {
        if let Some((slot, _)) = step.submit {
            self.pending = None;
            self.in_flight.push_back(slot);
        }
        if step.drain.is_some() {
            self.in_flight.pop_front();
        }
    }

    /// What the fill of this step staged: `Some(batch)` (submitted next step) or `None` at the
    /// end of the input.
    pub(super) fn staged(&mut self, batch: Option<P>) {
        match batch {
            None => self.ended = true,
            Some(b) => {
                self.pending = Some((self.next, b));
                self.next = (self.next + 1) % self.slots;
            }
        }
    }

    /// Submitted slots, oldest first.
    pub(super) fn in_flight(&self) -> impl Iterator<Item = usize> + '_ {
        self.in_flight.iter().copied()
    }
}

/// Adds one step's timings: the submitting/draining side's and the fill's.
pub(super) fn add_step(ph: &mut Phases, side: &Phases, fill_s: f64) {
    ph.wait_s += side.wait_s;
    ph.sink_s += side.sink_s;
    ph.release_s += side.release_s;
    ph.submit_s += side.submit_s;
    ph.refetched += side.refetched;
    ph.fill_s += fill_s;
}
