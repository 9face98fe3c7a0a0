//! The `ptxflow` command: `info`, `emit`, `demo`, and one verb per pipeline.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cli;

#[derive(Parser)]
#[command(name = "ptxflow", version, about = "PTX generated from Rust, GPU pipelines through cudarc")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Device facts (or why there is none) and every kernel's registers and shared memory.
    Info,
    /// Write each kernel's PTX to a directory.
    Emit(cli::emit::EmitArgs),
    /// Run every pipeline on generated data (GPU when present, else CPU) and print a table.
    Demo,
    /// Align a source point cloud to a target with NDT and print T_target_source.
    Ndt(cli::ndt::NdtArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info => cli::info::run(),
        Command::Emit(args) => cli::emit::run(args),
        Command::Demo => cli::demo::run(),
        Command::Ndt(args) => cli::ndt::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ptxflow: error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}
