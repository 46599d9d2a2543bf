pub mod demo;
pub mod doctor;
pub mod logging;
pub mod trace;
