//! Pure counting over decoded events: no I/O and no sentences (the verdicts' kinds and
//! figures are here, `views/report/verdict` says them), so every view and test can share it.
#[cfg(test)]
mod agreement;
pub mod blackhole;
pub mod counting;
pub mod kernel_counted;
pub mod metrics;
pub mod quantiles;
pub mod refusals;
pub mod report;
pub mod stall;
pub mod top;
