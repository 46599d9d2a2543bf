pub mod kallsyms;
pub mod listeners;
pub mod netns;
pub mod netstat;
pub mod privileges;
pub mod sysctl;
pub mod tcp_metrics;
pub mod uname;
