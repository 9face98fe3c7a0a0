#[derive(clap::Args)]
pub struct EmitArgs {}
pub fn run(_a: EmitArgs) -> ptxflow::Result<()> { Ok(()) }
