//! Pure counting over decoded events: no I/O and no sentences (the verdicts' kinds and
//! figures are here, `views/report/verdict` says them), so every view and test can share it.
#[cfg(test)]
mod agreement;
pub(crate) mod blackhole;
pub(crate) mod counting;
pub mod kernel_counted;
pub mod metrics;
pub(crate) mod packed;
pub(crate) mod quantiles;
pub(crate) mod refusals;
pub(crate) mod report;
pub(crate) mod stall;
pub(crate) mod top;
