pub mod demo;
pub mod emit;
pub mod info;
pub mod ndt;
