pub fn run() -> ptxflow::Result<()> { Ok(()) }
