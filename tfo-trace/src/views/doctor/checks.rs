//! doctor's six lessons in words: each [`Check`] (`diagnosis::checks` decides them) said
//! as its name, what was found and the advice, one function per lesson.
use std::net::SocketAddr;

use serde::Serialize;

use crate::{
    diagnosis::checks::{Check, Found, KeyPersistence},
    kernel::netstat::ListenCounters,
};

/// One lesson as doctor says it, in text and in JSON (these keys, in this order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Said {
    pub name: &'static str,
    pub ok: bool,
    /// What was found on this host.
    pub detail: String,
    /// One line: what to do (or remember).
    pub advice: &'static str,
}

/// The words for `c`.
pub(super) fn said(c: &Check) -> Said {
    let (name, detail, advice) = match &c.found {
        Found::SysctlPerNamespace(values) => sysctl_per_namespace(values),
        Found::MissedListen(missed) => missed_listen(missed),
        Found::Clamped { at_limit, tfo_listeners } => clamped(at_limit, *tfo_listeners),
        Found::KeyPersisted(p) => key_persisted(p),
        Found::BlackholeOff(off) => blackhole(off),
        Found::Syncookies { mode, sent } => syncookies(mode, sent),
    };
    Said { name, ok: c.ok, detail, advice }
}

/// A lesson's name, what was found, and its advice.
type Words = (&'static str, String, &'static str);

/// `none` when nothing was found, else `before` and what was, comma-separated.
fn listed(found: &[String], none: &str, before: &str) -> String {
    if found.is_empty() {
        none.into()
    } else {
        format!("{before}{}", found.join(", "))
    }
}

/// `addr in namespace`, as every lesson names a listener.
fn listener_in(addr: &SocketAddr, namespace: &str) -> String {
    format!("{addr} in {namespace}")
}

fn sysctl_per_namespace(values: &[(u32, String)]) -> Words {
    let each: Vec<String> = values.iter().map(|(v, ns)| format!("{v:#x} in {ns}")).collect();
    (
        "sysctl per namespace",
        listed(&each, "net.ipv4.tcp_fastopen is unreadable", "net.ipv4.tcp_fastopen is "),
        "tcp_fastopen (and its key) is per network namespace, containers do not inherit the host's: \
         set it where the client or listener runs (`ip netns exec NAME sysctl -w net.ipv4.tcp_fastopen=3`)",
    )
}

fn missed_listen(missed: &[(SocketAddr, String)]) -> Words {
    let each: Vec<String> = missed.iter().map(|(addr, ns)| listener_in(addr, ns)).collect();
    (
        "0x400 read only at listen()",
        listed(&each, "no listener missed bit 0x400", "TFO off (max_qlen 0) although 0x400 is set: "),
        "bit 0x400 (TFO on every listener) is applied at listen() only: restart listeners that started \
         before it was set",
    )
}

fn clamped(at_limit: &[(SocketAddr, String, u32)], tfo_listeners: usize) -> Words {
    let each: Vec<String> = at_limit
        .iter()
        .map(|(addr, ns, q)| format!("{} (max_qlen {q} = somaxconn)", listener_in(addr, ns)))
        .collect();
    (
        "fastopen= clamped to somaxconn",
        listed(
            &each,
            &format!("{tfo_listeners} TFO listener(s), none at the somaxconn limit"),
            "probably clamped: ",
        ),
        "the kernel silently caps a listener's TFO queue (fastopen=, TCP_FASTOPEN) at net.core.somaxconn: \
         raise somaxconn first",
    )
}

fn key_persisted(p: &KeyPersistence) -> Words {
    (
        "key persisted",
        match p {
            KeyPersistence::SetAtBoot(files) => format!("set at boot by {}", files.join(", ")),
            KeyPersistence::NoServer => "no TFO server namespace".into(),
            KeyPersistence::NotPersisted(labels) => {
                format!("TFO server key not persisted in {}", labels.join(", "))
            }
        },
        "a key not persisted is regenerated at reboot (and is random per namespace): every cookie issued \
         before is refused once; persist net.ipv4.tcp_fastopen_key in /etc/sysctl.d/, the same on every \
         server behind one address",
    )
}

fn blackhole(off: &[String]) -> Words {
    (
        "blackhole detection",
        listed(off, "on in every namespace with TFO clients", "off in "),
        "off by default since 5.14, and in the stable kernels that took the change (Debian's 5.10 among \
         them): tcp_fastopen_blackhole_timeout_sec=0. On (e.g. 3600), the kernel pauses active TFO in the \
         whole namespace on a TFO socket's third timeout in a row, or when it gives up before: a connect \
         to a destination that answers no SYN at all, or a TFO connection (a server's TFO child too) whose \
         data is lost after the handshake. It does not catch a path that drops only SYN-data or only SYNs \
         with a TFO option: the plain SYN resent after the first timeout gets through, so every connect \
         there still pays ~1 s and nothing is paused (measured: \
         blackhole_detection_misses_a_path_that_drops_only_syn_data); `tfo-trace stalls` names those \
         destinations",
    )
}

fn syncookies(mode: &[String], sent: &[(String, ListenCounters)]) -> Words {
    let mut found: Vec<String> = mode.iter().map(|ns| format!("tcp_syncookies=2 in {ns}")).collect();
    found.extend(sent.iter().map(|(ns, c)| {
        format!(
            "listeners in {ns} answered {} SYNs with syncookies (TcpExtSyncookiesSent)",
            c.syncookies_sent
        )
    }));
    (
        "syncookies",
        listed(&found, "no TFO server namespace answers SYNs with syncookies", ""),
        "with tcp_syncookies=2 (or under a SYN flood, with 1) a listener answers SYNs with a syncookie \
         and skips TFO: SYN-data is not accepted and no TFO counter moves (TcpExtSyncookiesSent does); \
         keep 1, the default, on TFO servers",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::checks::samples::{on_a_host_that_serves, on_a_syncookie_server, on_sample_facts};

    fn said_all(checks: &[Check]) -> Vec<Said> {
        checks.iter().map(said).collect()
    }

    fn by_name<'a>(said: &'a [Said], name: &str) -> &'a Said {
        said.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no check {name}: {said:?}"))
    }

    #[test]
    fn six_lessons_on_fixed_facts() {
        let c = said_all(&on_sample_facts());
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

    #[test]
    fn syncookies_said() {
        let c = said_all(&on_a_syncookie_server());
        let sc = by_name(&c, "syncookies");
        assert_eq!((sc.ok, sc.detail.as_str()), (false, "tcp_syncookies=2 in current"));
        let flood = ListenCounters { syncookies_sent: 40, ..Default::default() };
        let sent = said(&Check::from(Found::Syncookies { mode: vec![], sent: vec![("srv".into(), flood)] }));
        assert_eq!(
            (sent.ok, sent.detail.as_str()),
            (false, "listeners in srv answered 40 SYNs with syncookies (TcpExtSyncookiesSent)")
        );
        assert_eq!(by_name(&c, "blackhole detection").detail, "on in every namespace with TFO clients");
    }

    #[test]
    fn a_listener_that_missed_0x400_and_a_persisted_key() {
        let c = said_all(&on_a_host_that_serves());
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

    #[test]
    fn nothing_readable_and_no_server_said() {
        let per_ns = said(&Check { ok: true, found: Found::SysctlPerNamespace(vec![]) });
        assert_eq!(per_ns.detail, "net.ipv4.tcp_fastopen is unreadable");
        let key = said(&Check { ok: true, found: Found::KeyPersisted(KeyPersistence::NoServer) });
        assert_eq!(key.detail, "no TFO server namespace");
    }

    /// Each lesson's advice, word for word, and its name in the JSON's order.
    #[test]
    fn every_lesson_s_advice_in_its_words() {
        let c = said_all(&on_sample_facts());
        let names: Vec<&str> = c.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "sysctl per namespace",
                "0x400 read only at listen()",
                "fastopen= clamped to somaxconn",
                "key persisted",
                "blackhole detection",
                "syncookies"
            ]
        );
        let advice: Vec<&str> = c.iter().map(|s| s.advice).collect();
        assert_eq!(
            advice,
            [
                "tcp_fastopen (and its key) is per network namespace, containers do not inherit the host's: set it where the client or listener runs (`ip netns exec NAME sysctl -w net.ipv4.tcp_fastopen=3`)",
                "bit 0x400 (TFO on every listener) is applied at listen() only: restart listeners that started before it was set",
                "the kernel silently caps a listener's TFO queue (fastopen=, TCP_FASTOPEN) at net.core.somaxconn: raise somaxconn first",
                "a key not persisted is regenerated at reboot (and is random per namespace): every cookie issued before is refused once; persist net.ipv4.tcp_fastopen_key in /etc/sysctl.d/, the same on every server behind one address",
                "off by default since 5.14, and in the stable kernels that took the change (Debian's 5.10 among them): tcp_fastopen_blackhole_timeout_sec=0. On (e.g. 3600), the kernel pauses active TFO in the whole namespace on a TFO socket's third timeout in a row, or when it gives up before: a connect to a destination that answers no SYN at all, or a TFO connection (a server's TFO child too) whose data is lost after the handshake. It does not catch a path that drops only SYN-data or only SYNs with a TFO option: the plain SYN resent after the first timeout gets through, so every connect there still pays ~1 s and nothing is paused (measured: blackhole_detection_misses_a_path_that_drops_only_syn_data); `tfo-trace stalls` names those destinations",
                "with tcp_syncookies=2 (or under a SYN flood, with 1) a listener answers SYNs with a syncookie and skips TFO: SYN-data is not accepted and no TFO counter moves (TcpExtSyncookiesSent does); keep 1, the default, on TFO servers",
            ]
        );
        let j = serde_json::to_string(&c[3]).unwrap();
        assert!(j.starts_with(r#"{"name":"key persisted","ok":false,"detail":"TFO server key not persisted in srv","advice":"a key"#), "{j}");
    }
}
