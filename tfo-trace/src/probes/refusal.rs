//! Why a backend did not load, in a line: the step that failed, the kernel's errno by name,
//! and what that answer means for the backend where it is known.
use crate::backends::Backend;

/// The step that failed and the kernel's errno, without aya's verifier-log noise:
/// "loading/attaching tfo_try_fastopen_fentry (FEntry tcp_try_fastopen): EPERM".
pub(crate) fn short_reason(err: &anyhow::Error) -> String {
    match errno_of(err) {
        // The kernel's own ENOTSUPP, which libc has no text for ("Unknown error 524" in
        // glibc, "No error information" in musl).
        Some(ENOTSUPP) => format!("{err}: ENOTSUPP (not supported by this kernel)"),
        Some(n) => format!("{err}: {} ({})", errno_name(n), std::io::Error::from_raw_os_error(n)),
        None => format!("{err:#}"),
    }
}

/// The kernel-internal errno `-ENOTSUPP` (include/linux/errno.h), which reaches userspace
/// from BPF attach paths.
const ENOTSUPP: i32 = 524;

/// Why `backend` did not load: [`short_reason`], and what the kernel's answer means for
/// that backend where it is known.
pub(super) fn backend_refused(backend: Backend, err: &anyhow::Error) -> String {
    let reason = short_reason(err);
    match (backend, errno_of(err)) {
        // register_fentry() (kernel/bpf/trampoline.c) answers ENOTSUPP where the
        // architecture cannot divert a kernel function to a BPF trampoline: arm64 got the
        // trampolines in 6.0 and the ftrace direct calls they attach through in 6.4.
        (Backend::Fentry, Some(ENOTSUPP)) => format!(
            "{reason}: this kernel cannot attach BPF trampolines to kernel functions (arm64 can \
             from Linux 6.4, with ftrace direct calls)"
        ),
        _ => reason,
    }
}

/// The kernel's errno behind `err`, where a syscall failed.
pub(super) fn errno_of(err: &anyhow::Error) -> Option<i32> {
    err.chain().filter_map(|e| e.downcast_ref::<std::io::Error>()).find_map(|e| e.raw_os_error())
}

fn errno_name(n: i32) -> String {
    match n {
        libc::EPERM => "EPERM".into(),
        libc::ENOENT => "ENOENT".into(),
        libc::EACCES => "EACCES".into(),
        libc::EINVAL => "EINVAL".into(),
        libc::E2BIG => "E2BIG".into(),
        libc::EOPNOTSUPP => "EOPNOTSUPP".into(),
        ENOTSUPP => "ENOTSUPP".into(),
        other => format!("errno {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_fentry_backend_refused_with_enotsupp_says_why() {
        let err = anyhow::Error::new(std::io::Error::from_raw_os_error(ENOTSUPP))
            .context("loading/attaching tfo_try_fastopen_fentry (FEntry tcp_try_fastopen)");
        let why = backend_refused(Backend::Fentry, &err);
        assert!(why.starts_with("loading/attaching tfo_try_fastopen_fentry (FEntry tcp_try_fastopen): ENOTSUPP (not supported by this kernel): this kernel cannot attach BPF trampolines"), "{why}");
        assert!(!backend_refused(Backend::Kprobe, &err).contains("trampolines"), "only fentry uses them");
    }
}
