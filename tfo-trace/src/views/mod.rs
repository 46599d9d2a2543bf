pub mod doctor;
pub mod trace;
pub mod logging;
pub mod demo;
