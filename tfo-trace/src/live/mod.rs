//! The live run's plumbing, shared by every view that traces (trace, stalls, top, report,
//! export, demo) and by none of them alone: the session that loads, reads and records
//! ([`session`]), when it stops ([`stop`]), the namespaces' own counters followed beside it
//! ([`namespace_counters`]), blackhole detection's pauses and those counters as the live
//! views say them ([`paused`], [`counted`]), the closing summary ([`closing`]); and the two streams every command writes
//! through ([`output`], [`logging`]).
pub(crate) mod closing;
pub(crate) mod counted;
pub mod logging;
pub mod namespace_counters;
pub mod output;
pub(crate) mod paused;
pub mod session;
pub(crate) mod stop;
