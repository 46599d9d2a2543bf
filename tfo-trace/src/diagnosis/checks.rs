//! The six lessons users of TFO keep learning the hard way, each checked against the
//! host's facts with its advice. Pure.
use std::collections::BTreeSet;

use serde::Serialize;

use crate::kernel::{listeners::TfoListener, sysctl::TfoNamespace};

/// One lesson, checked: `ok` false means the advice applies here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    /// What was found on this host.
    pub detail: String,
    /// One line: what to do (or remember).
    pub advice: String,
}

/// The six lessons, checked against this host (pure).
pub(crate) fn checks(
    namespaces: &[TfoNamespace],
    listeners: &[TfoListener],
    key_files: &[String],
) -> Vec<Check> {
    let mut out = Vec::new();

    // 1. The sysctl is per network namespace.
    let values: Vec<String> = namespaces
        .iter()
        .filter_map(|n| n.tcp_fastopen.as_ref().ok().map(|v| format!("{:#x} in {}", v.0, n.label())))
        .collect();
    let distinct: BTreeSet<u32> =
        namespaces.iter().filter_map(|n| n.tcp_fastopen.as_ref().ok().map(|v| v.0)).collect();
    out.push(Check {
        name: "sysctl per namespace".into(),
        ok: distinct.len() <= 1,
        detail: format!("net.ipv4.tcp_fastopen is {}", if values.is_empty() { "unreadable".into() } else { values.join(", ") }),
        advice: "tcp_fastopen (and its key) is per network namespace, containers do not inherit the host's: \
                 set it where the client or listener runs (`ip netns exec NAME sysctl -w net.ipv4.tcp_fastopen=3`)"
            .into(),
    });

    // 2. 0x400 is read only at listen().
    let missed: Vec<String> = listeners
        .iter()
        .filter(|l| {
            matches!(l.max_qlen, Ok(0))
                && namespaces.iter().any(|n| {
                    n.inode == l.netns
                        && n.tcp_fastopen
                            .as_ref()
                            .is_ok_and(|v| v.server_all_listeners() && v.server_enabled())
                })
        })
        .map(|l| format!("{} in {}", l.addr, l.namespace))
        .collect();
    out.push(Check {
        name: "0x400 read only at listen()".into(),
        ok: missed.is_empty(),
        detail: if missed.is_empty() {
            "no listener missed bit 0x400".into()
        } else {
            format!("TFO off (max_qlen 0) although 0x400 is set: {}", missed.join(", "))
        },
        advice:
            "bit 0x400 (TFO on every listener) is applied at listen() only: restart listeners that started \
                 before it was set"
                .into(),
    });

    // 3. fastopen= above somaxconn is clamped.
    let clamped: Vec<String> = listeners
        .iter()
        .filter_map(|l| match (&l.max_qlen, l.somaxconn) {
            (Ok(q), Some(s)) if *q > 0 && *q >= s => {
                Some(format!("{} in {} (max_qlen {q} = somaxconn)", l.addr, l.namespace))
            }
            _ => None,
        })
        .collect();
    out.push(Check {
        name: "fastopen= clamped to somaxconn".into(),
        ok: clamped.is_empty(),
        detail: if clamped.is_empty() {
            let n = listeners.iter().filter(|l| matches!(l.max_qlen, Ok(q) if q > 0)).count();
            format!("{n} TFO listener(s), none at the somaxconn limit")
        } else {
            format!("probably clamped: {}", clamped.join(", "))
        },
        advice: "the kernel silently caps a listener's TFO queue (fastopen=, TCP_FASTOPEN) at net.core.somaxconn: \
                 raise somaxconn first"
            .into(),
    });

    // 4. A key not persisted is regenerated at reboot.
    let servers: Vec<String> = namespaces
        .iter()
        .filter(|n| {
            n.tcp_fastopen.as_ref().is_ok_and(|v| v.server_enabled()) || matches!(&n.key, Ok(k) if k.primary)
        })
        .map(|n| n.label())
        .collect();
    let init_persisted = !key_files.is_empty();
    let unpersisted: Vec<String> = namespaces
        .iter()
        .filter(|n| servers.contains(&n.label()) && !(n.init == Some(true) && init_persisted))
        .map(|n| n.label())
        .collect();
    out.push(Check {
        name: "key persisted".into(),
        ok: unpersisted.is_empty(),
        detail: match (unpersisted.is_empty(), init_persisted) {
            (true, true) => format!("set at boot by {}", key_files.join(", ")),
            (true, false) => "no TFO server namespace".into(),
            (false, _) => format!("TFO server key not persisted in {}", unpersisted.join(", ")),
        },
        advice: "a key not persisted is regenerated at reboot (and is random per namespace): every cookie issued \
                 before is refused once; persist net.ipv4.tcp_fastopen_key in /etc/sysctl.d/, the same on every \
                 server behind one address"
            .into(),
    });

    // 5. Blackhole detection is off by default since 5.14; it matters where clients use TFO.
    let client = |n: &&TfoNamespace| n.tcp_fastopen.as_ref().is_ok_and(|v| v.client_enabled());
    let off: Vec<String> = namespaces
        .iter()
        .filter(client)
        .filter(|n| matches!(n.blackhole_timeout_sec, Ok(0)))
        .map(|n| n.label())
        .collect();
    out.push(Check {
        name: "blackhole detection".into(),
        ok: off.is_empty(),
        detail: if off.is_empty() {
            "on in every namespace with TFO clients".into()
        } else {
            format!("off in {}", off.join(", "))
        },
        advice: "off by default since 5.14 (tcp_fastopen_blackhole_timeout_sec=0). On (e.g. 3600), the kernel \
                 pauses active TFO after a TFO connect whose SYNs all time out (a path that drops every SYN with \
                 a TFO option). It does not catch a path that drops only SYN-data: the plain SYN resent after \
                 the timeout gets through, so every connect there still pays ~1 s and nothing is paused \
                 (measured: blackhole_detection_misses_a_path_that_drops_only_syn_data); `tfo-trace stalls` \
                 names those destinations"
            .into(),
    });

    // 6. A listener in syncookie mode skips TFO, and no TFO counter says so.
    let cookies: Vec<String> = namespaces
        .iter()
        .filter(|n| n.tcp_fastopen.as_ref().is_ok_and(|v| v.server_enabled()))
        .filter(|n| matches!(n.syncookies, Ok(2)))
        .map(|n| n.label())
        .collect();
    out.push(Check {
        name: "syncookies".into(),
        ok: cookies.is_empty(),
        detail: if cookies.is_empty() {
            "no TFO server namespace answers every SYN with a syncookie".into()
        } else {
            format!("tcp_syncookies=2 in {}", cookies.join(", "))
        },
        advice: "with tcp_syncookies=2 (or under a SYN flood, with 1) a listener answers SYNs with a syncookie \
                 and skips TFO: SYN-data is not accepted and no TFO counter moves (TcpExtSyncookiesSent does); \
                 keep 1, the default, on TFO servers"
            .into(),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{diagnosis::sample_facts, kernel::sysctl::TcpFastopen};

    fn listener(ns: &TfoNamespace, addr: &str, max_qlen: Result<u32, String>, somaxconn: u32) -> TfoListener {
        TfoListener {
            namespace: ns.label(),
            netns: ns.inode,
            addr: addr.parse().unwrap(),
            inode: 1,
            pid: Some(7),
            comm: Some("nginx".into()),
            max_qlen,
            somaxconn: Some(somaxconn),
        }
    }

    fn by_name<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no check {name}: {checks:?}"))
    }

    #[test]
    fn six_lessons_on_fixed_facts() {
        let f = sample_facts();
        let srv = &f.namespaces[1];
        let listeners =
            [listener(srv, "0.0.0.0:443", Ok(4096), 4096), listener(srv, "0.0.0.0:80", Ok(16), 4096)];
        let c = checks(&f.namespaces, &listeners, &[]);
        assert_eq!(c.len(), 6);
        let per_ns = by_name(&c, "sysctl per namespace");
        assert!(!per_ns.ok, "0x1 here, 0x403 in srv");
        assert_eq!(per_ns.detail, "net.ipv4.tcp_fastopen is 0x1 in current, 0x403 in srv");
        assert!(by_name(&c, "0x400 read only at listen()").ok, "both listeners have TFO on");
        let clamped = by_name(&c, "fastopen= clamped to somaxconn");
        assert!(!clamped.ok);
        assert_eq!(clamped.detail, "probably clamped: 0.0.0.0:443 in srv (max_qlen 4096 = somaxconn)");
        let key = by_name(&c, "key persisted");
        assert_eq!((key.ok, key.detail.as_str()), (false, "TFO server key not persisted in srv"));
        let bh = by_name(&c, "blackhole detection");
        assert_eq!((bh.ok, bh.detail.as_str()), (false, "off in current"));
        assert!(by_name(&c, "syncookies").ok);
    }

    /// Issue 37: a namespace that only serves is not told about client settings, and one
    /// whose listeners answer every SYN with a syncookie is told that TFO is skipped there.
    #[test]
    fn client_lessons_only_where_clients_use_tfo_and_syncookies_said() {
        let mut f = sample_facts();
        f.namespaces[0].tcp_fastopen = Ok(TcpFastopen(0x2));
        let c = checks(&f.namespaces, &[], &[]);
        assert!(by_name(&c, "blackhole detection").ok, "no TFO client here: {c:?}");
        f.namespaces[0].syncookies = Ok(2);
        let c = checks(&f.namespaces, &[], &[]);
        let sc = by_name(&c, "syncookies");
        assert_eq!((sc.ok, sc.detail.as_str()), (false, "tcp_syncookies=2 in current"));
    }

    #[test]
    fn a_listener_that_missed_0x400_and_a_persisted_key() {
        let mut f = sample_facts();
        // The host itself is the server, its key set at boot.
        f.namespaces[0].tcp_fastopen = Ok(TcpFastopen(0x403));
        f.namespaces[0].key = Ok(crate::kernel::sysctl::FastopenKeyStatus { primary: true, backup: false });
        f.namespaces.truncate(1);
        let cur = &f.namespaces[0];
        let listeners =
            [listener(cur, "0.0.0.0:8080", Ok(0), 4096), listener(cur, "0.0.0.0:22", Err("x".into()), 4096)];
        let files = ["/etc/sysctl.d/tfo.conf".to_string()];
        let c = checks(&f.namespaces, &listeners, &files);
        let missed = by_name(&c, "0x400 read only at listen()");
        assert_eq!(
            (missed.ok, missed.detail.as_str()),
            (false, "TFO off (max_qlen 0) although 0x400 is set: 0.0.0.0:8080 in current")
        );
        assert!(by_name(&c, "sysctl per namespace").ok, "one namespace, one value");
        let key = by_name(&c, "key persisted");
        assert_eq!((key.ok, key.detail.as_str()), (true, "set at boot by /etc/sysctl.d/tfo.conf"));
        assert_eq!(
            by_name(&c, "fastopen= clamped to somaxconn").detail,
            "0 TFO listener(s), none at the somaxconn limit"
        );
    }
}
