pub mod demo;
pub mod doctor;
pub mod logging;
pub mod stalls;
pub mod stop;
pub mod trace;
