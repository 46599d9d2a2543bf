pub mod netstat;
pub mod kallsyms;
pub mod netns;
pub mod privileges;
pub mod sysctl;
pub mod listeners;
