pub mod trace;
pub mod cluster;
pub mod metrics;
pub mod sim;
pub mod import;
pub mod augment;
pub mod plot;
pub mod suite;
