//! Host facts: what the running kernel and this host say, each read by one collector
//! (kernel release and BTF, privileges, tracing facilities and BPF program types, kallsyms,
//! TFO sysctls per namespace, counters, tcp_metrics, listeners and their owners (read off the
//! reader's thread: `listener_directory`), cgroups and
//! the containers the runtimes keep in them).
//! `host` gathers the ones `doctor` judges.
pub mod cgroup;
pub(crate) mod containers;
pub(crate) mod cookie_cache;
pub mod every_netns;
pub(crate) mod host;
pub(crate) mod jiffies;
pub(crate) mod kallsyms;
pub(crate) mod listener_directory;
pub(crate) mod listeners;
pub mod netns;
pub mod netstat;
pub(crate) mod privileges;
pub(crate) mod program_types;
pub(crate) mod sock_diag;
pub(crate) mod sysctl;
pub mod tcp_metrics;
pub(crate) mod uname;

use serde::{Serialize, Serializer};

/// Serializes `Ok(v)` as `v` and `Err(e)` as `{"error": e}`: a fact that could not be read
/// says why in place (doctor's JSON).
pub(crate) fn ser_result<T: Serialize, S: Serializer>(
    r: &Result<T, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct ErrorObj<'a> {
        error: &'a str,
    }
    match r {
        Ok(v) => v.serialize(s),
        Err(e) => ErrorObj { error: e }.serialize(s),
    }
}
