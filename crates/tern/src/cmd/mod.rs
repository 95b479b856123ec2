pub mod agent;
pub mod bench;
pub mod lab;
pub mod man;
pub mod probe;
pub mod route;
pub mod serve;
pub mod tune;
