pub mod demo;
pub mod doctor;
pub mod export;
#[cfg(feature = "fixtures")]
pub mod floor;
pub mod man;
mod replayed;
pub mod report;
pub mod stalls;
pub mod top;
pub mod trace;
pub(crate) mod web_config;
