//! What the kernel says it is: uname(2), and whether it carries BTF.
use serde::Serialize;

use std::ffi::CStr;

/// Where the kernel's own BTF is (CONFIG_DEBUG_INFO_BTF).
pub(crate) const BTF_VMLINUX_PATH: &str = "/sys/kernel/btf/vmlinux";

/// The fields of `struct utsname`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Uname {
    pub sysname: String,
    /// The host name.
    pub nodename: String,
    /// `uname -r`, e.g. `6.18.44`.
    pub release: String,
    pub version: String,
    pub machine: String,
}

/// uname(2); None in the (theoretical) case it fails.
pub(crate) fn uname() -> Option<Uname> {
    // SAFETY: uname fills a zeroed struct; its fields are NUL-terminated C strings.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return None;
        }
        let f = |p: &[libc::c_char]| CStr::from_ptr(p.as_ptr()).to_string_lossy().into_owned();
        Some(Uname {
            sysname: f(&u.sysname),
            nodename: f(&u.nodename),
            release: f(&u.release),
            version: f(&u.version),
            machine: f(&u.machine),
        })
    }
}

/// The kernel as `doctor` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct KernelInfo {
    pub sysname: String,
    pub release: String,
    pub version: String,
    pub machine: String,
    pub btf_vmlinux: bool,
    pub btf_size: Option<u64>,
}

impl KernelInfo {
    pub fn collect() -> KernelInfo {
        let u = uname().unwrap_or_default();
        let btf = std::fs::metadata(BTF_VMLINUX_PATH).ok();
        KernelInfo {
            sysname: u.sysname,
            release: u.release,
            version: u.version,
            machine: u.machine,
            btf_vmlinux: btf.is_some(),
            btf_size: btf.map(|m| m.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel() {
        let u = uname().unwrap();
        assert_eq!(u.sysname, "Linux");
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        assert_eq!(u.release, release.trim());
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(u.nodename, host.trim());
    }
}
