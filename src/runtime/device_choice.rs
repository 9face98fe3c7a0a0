//! Where a job runs: [`Device::Cpu`], [`Device::Gpu`] or [`Device::Auto`], and the [`Choice`]
//! a pipeline made (the device that ran and why), which the command line prints.
//!
//! Each domain resolves `Auto` with its own cost model (NDT: [`crate::ndt::plan`]), because
//! which device finishes first depends on the job: a single small alignment is done on the CPU
//! before a GPU context exists, while batches and large inputs repay the start-up.

use crate::{Error, Result};

/// Where a job should run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU implementation (all cores).
    Cpu,
    /// The GPU implementation; an error ([`Error::NoDevice`]) without a usable GPU.
    Gpu,
    /// Whichever the domain's cost model expects to finish first; the CPU when there is no
    /// usable GPU.
    #[default]
    Auto,
}

impl Device {
    /// `cpu`, `gpu` or `auto`.
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
            Device::Auto => "auto",
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Device {
    type Err = Error;

    /// Parses `cpu`, `gpu` or `auto` (any case).
    fn from_str(s: &str) -> Result<Device> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Device::Cpu),
            "gpu" | "cuda" => Ok(Device::Gpu),
            "auto" => Ok(Device::Auto),
            _ => Err(Error::input(format!(
                "unknown device `{s}` (expected cpu, gpu or auto)"
            ))),
        }
    }
}

/// The device a job ran on (never [`Device::Auto`]) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// [`Device::Cpu`] or [`Device::Gpu`].
    pub device: Device,
    /// One line for people: "asked for", or the estimate that decided, or why there is no GPU.
    pub reason: String,
}

impl Choice {
    /// The device the caller named.
    pub fn asked(device: Device) -> Choice {
        Choice {
            device,
            reason: format!("--device {device}"),
        }
    }

    /// Whether the GPU runs the job.
    pub fn is_gpu(&self) -> bool {
        self.device == Device::Gpu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for d in [Device::Cpu, Device::Gpu, Device::Auto] {
            assert_eq!(d.name().parse::<Device>().unwrap(), d);
            assert_eq!(d.to_string(), d.name());
        }
        assert_eq!(" GPU ".parse::<Device>().unwrap(), Device::Gpu);
        let e = "tpu".parse::<Device>().unwrap_err().to_string();
        assert!(e.contains("cpu, gpu or auto"), "{e}");
    }
}
