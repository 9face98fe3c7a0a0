pub mod demo;
pub mod emit;
pub mod info;
pub mod lz4;
pub mod ndt;
pub mod output;
