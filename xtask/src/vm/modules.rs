//! The kernel modules the lab needs (veth, sch_netem, nf_tables, ...) and their closure: the
//! packages carry no `modules.dep` (depmod runs at install), so the dependencies come from
//! each module's `.modinfo`; written uncompressed to the initramfs in load order.
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};

use super::kernels::Kernel;

/// Kernel modules the lab needs; their dependencies are added from `.modinfo`. `tcp_diag`
/// (with inet_diag) answers `ss` over netlink: without it ss reads /proc/net/tcp6, which
/// does not say a socket is IPv6-only, and names `[::]:P` as `*:P`.
pub(super) const VM_MODULES: &[&str] = &["veth", "sch_netem", "nf_tables", "tcp_diag"];
/// Modules the lab needs where the kernel has them as modules rather than built in: the
/// nft `counter` expression (the middlebox rules count their drops) is `nft_counter.ko` on
/// 5.10 and part of nf_tables from 5.14 on; `numgen` (the middlebox that drops one SYN-data
/// in every K) is `nft_numgen.ko` on the Debian kernels; NAT (a nat chain, `redirect` to
/// listeners behind one port, `snat` to change the client's address) is `nft_chain_nat`,
/// `nft_redir` and `nft_nat`, with nf_nat and nf_conntrack as their dependencies; `reject
/// with tcp reset` in the lab's inet table (the firewall that resets SYN-data) is
/// `nft_reject_inet`, with nft_reject and nf_reject_ipv4/6.
pub(super) const VM_MODULES_IF_PRESENT: &[&str] =
    &["nft_counter", "nft_numgen", "nft_chain_nat", "nft_redir", "nft_nat", "nft_reject_inet"];

/// Copies `VM_MODULES` and their dependencies (uncompressed) to /modules; returns the file
/// names in load order (dependencies first).
pub(super) fn modules(k: &Kernel, root: &Path) -> Result<Vec<String>> {
    let mut index = HashMap::new();
    index_modules(&k.modules.join("kernel"), &mut index)?;
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for m in VM_MODULES {
        add_module(m, &index, &mut seen, &mut order)?;
    }
    for m in VM_MODULES_IF_PRESENT.iter().filter(|m| index.contains_key(**m)) {
        add_module(m, &index, &mut seen, &mut order)?;
    }
    let dst = root.join("modules");
    fs::create_dir_all(&dst)?;
    let mut names = Vec::new();
    for (name, bytes) in order {
        let file = format!("{name}.ko");
        fs::write(dst.join(&file), bytes)?;
        names.push(file);
    }
    Ok(names)
}

/// Module name (`-` spelled `_`) -> file, for every `.ko` / `.ko.xz` under `dir`.
pub(super) fn index_modules(dir: &Path, index: &mut HashMap<String, PathBuf>) -> Result<()> {
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            index_modules(&p, index)?;
        } else if let Some(n) = p.file_name().and_then(|n| n.to_str()) {
            if let Some(stem) = n.strip_suffix(".ko.xz").or_else(|| n.strip_suffix(".ko")) {
                index.insert(stem.replace('-', "_"), p.clone());
            }
        }
    }
    Ok(())
}

pub(super) fn add_module(
    name: &str,
    index: &HashMap<String, PathBuf>,
    seen: &mut BTreeSet<String>,
    order: &mut Vec<(String, Vec<u8>)>,
) -> Result<()> {
    let name = name.replace('-', "_");
    if !seen.insert(name.clone()) {
        return Ok(());
    }
    let path = index.get(&name).with_context(|| format!("kernel module {name} is not in the package"))?;
    let bytes = if path.extension().is_some_and(|e| e == "xz") {
        let out = Command::new("xz").arg("-dc").arg(path).output().context("running xz -dc")?;
        ensure!(out.status.success(), "xz -dc {} failed", path.display());
        out.stdout
    } else {
        fs::read(path)?
    };
    for dep in modinfo_depends(&bytes) {
        add_module(&dep, index, seen, order)?;
    }
    order.push((name, bytes));
    Ok(())
}

/// The `depends=a,b` entry of a module's `.modinfo` (NUL-separated `key=value` strings).
pub(super) fn modinfo_depends(ko: &[u8]) -> Vec<String> {
    ko.split(|&b| b == 0)
        .filter_map(|s| s.strip_prefix(b"depends="))
        .flat_map(|d| String::from_utf8_lossy(d).split(',').map(str::to_string).collect::<Vec<_>>())
        .filter(|d| !d.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modinfo_depends_lists_dependencies() {
        let ko = b"\x7fELF...\0license=GPL\0depends=nfnetlink,libcrc32c\0name=nf_tables\0";
        assert_eq!(modinfo_depends(ko), ["nfnetlink", "libcrc32c"]);
        assert!(modinfo_depends(b"depends=\0name=veth\0").is_empty());
    }
}
