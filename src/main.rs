//! The `ptxflow` command: `info`, `emit`, `demo`, and one verb per pipeline.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cli;

#[derive(Parser)]
#[command(
    name = "ptxflow",
    version,
    about = "PTX generated from Rust, GPU pipelines through cudarc"
)]
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
    /// LZ4 page compression to and from the standard frame format.
    Lz4(cli::lz4::Lz4Args),
    /// Align a source point cloud to a target with NDT and print T_target_source.
    Ndt(cli::ndt::NdtArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info => cli::info::run(),
        Command::Emit(args) => cli::emit::run(args),
        Command::Demo => cli::demo::run(),
        Command::Lz4(args) => cli::lz4::run(args),
        Command::Ndt(args) => cli::ndt::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut said = e.to_string();
            eprintln!("ptxflow: error: {said}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                // Most messages already quote their cause; print only what is new.
                let text = s.to_string();
                if !said.contains(&text) {
                    eprintln!("  caused by: {text}");
                    said.push_str(&text);
                }
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}
