pub mod bench;
pub mod serve;
