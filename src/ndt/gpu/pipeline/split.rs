//! [`SplitLinearize`] for [`GpuDerivativePipeline`] (`PTXFLOW_NDT_SPLIT` when the pipeline is
//! created, see `variants.rs`, or [`GpuDerivativePipeline::set_split`]): two groups of a batch, each
//! with its own request, result, counter and block-partial records, launched on the one stream
//! and each followed by an event, so the host waits for one group's round while the other's
//! is queued behind it. Needs mapped results ([`Transfer::Mapped`]): a round's results are
//! in host memory once its event has completed, without a copy command.

use super::round::Region;
use super::GpuDerivativePipeline;
use crate::kernels::ndt::derivatives::SLOT_VALUES;
use crate::ndt::gpu::config::Transfer;
use crate::ndt::linearize::{Linearization, LinearizeRequest, SplitLinearize};
use crate::{Error, Result};
use cudarc::driver::{sys, CudaEvent};

/// One group's round in flight: its requests and the event recorded after its launch.
pub(super) struct GroupRound {
    requests: Vec<LinearizeRequest>,
    done: CudaEvent,
}

/// Whether batches run split (`PTXFLOW_NDT_SPLIT`, see `super::super::variants`).
pub(super) fn split_from_env() -> bool {
    crate::ndt::gpu::variants::env_switch("PTXFLOW_NDT_SPLIT", crate::ndt::gpu::variants::SPLIT)
}

impl GpuDerivativePipeline {
    /// Lets batches of 2 up to the request capacity run as two groups in flight (see the
    /// module docs); takes effect for the next batch. Block partials are doubled once, so each
    /// group may use as many blocks as a plain round.
    ///
    /// Errors: driver errors (allocation).
    pub fn set_split(&mut self, split: bool) -> Result<()> {
        if split && !self.split_partials {
            let s = self.gpu.stream().clone();
            let slots = 2 * (self.partials.capacity() / SLOT_VALUES);
            self.partials =
                crate::runtime::DeviceBuffer::zeros(&s, SLOT_VALUES * slots, "NDT block partials")?;
            self.counters.allocations += 1;
            self.split_partials = true;
        }
        self.split = split;
        Ok(())
    }

    /// Whether batches may run split (see [`Self::set_split`]).
    pub fn split_enabled(&self) -> bool {
        self.split
    }

    /// Group `group`'s records: requests and results from slot `group · ceil(capacity / 2)`,
    /// half of the block partials each.
    fn group_region(&self, group: usize) -> Region {
        let half = self.partials.capacity() / SLOT_VALUES / 2;
        Region {
            off: group * self.capacity.requests.div_ceil(2),
            partial_off: group * half,
            partial_slots: half,
            group,
        }
    }

    /// Whether a batch of `jobs` alignments can run split now.
    pub(super) fn can_split(&self, jobs: usize) -> bool {
        self.split
            && self.split_partials
            && self.transfer == Transfer::Mapped
            && (2..=self.capacity.requests).contains(&jobs)
    }
}

impl SplitLinearize for GpuDerivativePipeline {
    fn merge_tail(&self) -> usize {
        self.tail.merge
    }

    fn finish_split(&mut self) -> Result<()> {
        self.end_split()
    }

    fn submit(&mut self, group: usize, requests: &[LinearizeRequest]) -> Result<()> {
        if group > 1 || self.groups[group].is_some() {
            return Err(Error::input(format!(
                "GPU NDT pipeline: group {group} is not free for a new round"
            )));
        }
        let region = self.group_region(group);
        let room = if group == 0 {
            self.capacity.requests.div_ceil(2)
        } else {
            self.capacity.requests / 2
        };
        if requests.is_empty() || requests.len() > room {
            return Err(Error::input(format!(
                "GPU NDT pipeline: {} requests for split group {group} (room for 1..={room})",
                requests.len()
            )));
        }
        let t = *self
            .target
            .as_ref()
            .ok_or_else(|| Error::input("GPU NDT pipeline: upload_target before linearizing"))?;
        self.start_round(&t, requests, region, true)?;
        let done = match self.tail.events[group].take() {
            Some(e) => e,
            None => self
                .gpu
                .stream()
                .context()
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .map_err(Error::driver("cuEventCreate (NDT split group)"))?,
        };
        done.record(self.group_stream(group))
            .map_err(Error::driver("cuEventRecord (NDT split group)"))?;
        self.groups[group] = Some(GroupRound {
            requests: requests.to_vec(),
            done,
        });
        Ok(())
    }

    fn complete(&mut self, group: usize) -> Result<Vec<Linearization>> {
        let round = self
            .groups
            .get_mut(group)
            .and_then(Option::take)
            .ok_or_else(|| {
                Error::input(format!(
                    "GPU NDT pipeline: no round of group {group} in flight"
                ))
            })?;
        round
            .done
            .synchronize()
            .map_err(Error::driver("running ndt_derivatives (split group)"))?;
        // Waited for: the event may be recorded again for the group's next round.
        self.tail.events[group] = Some(round.done);
        let t = *self
            .target
            .as_ref()
            .ok_or_else(|| Error::input("GPU NDT pipeline: upload_target before linearizing"))?;
        let mut out = Vec::with_capacity(round.requests.len());
        let off = self.group_region(group).off;
        self.decode(&round.requests, &t, off, &mut out)?;
        Ok(out)
    }
}
