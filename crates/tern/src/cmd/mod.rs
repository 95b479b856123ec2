pub mod bench;
pub mod man;
pub mod serve;
pub mod tune;
