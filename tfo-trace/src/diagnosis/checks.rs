//! The six lessons users of TFO keep learning the hard way, each checked against the
//! host's facts: typed ([`Check`]: which lesson, whether it holds here, what was found),
//! pure; `views/doctor/checks.rs` says each lesson's name, finding and advice in words.
use std::{collections::BTreeSet, net::SocketAddr};

use crate::kernel::{listeners::TfoListener, netstat::ListenCounters, sysctl::TfoNamespace};

/// One lesson, checked: `ok` false means its advice applies here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub ok: bool,
    /// Which lesson, with what was found on this host.
    pub found: Found,
}

/// What each lesson found, one variant per lesson, in the order doctor gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Lesson 1: the sysctl is per network namespace: each readable `tcp_fastopen` with its
    /// namespace's label.
    SysctlPerNamespace(Vec<(u32, String)>),
    /// Lesson 2: 0x400 is read only at listen(): listeners with TFO off although their
    /// namespace sets it, each with its namespace's label.
    MissedListen(Vec<(SocketAddr, String)>),
    /// Lesson 3: fastopen= above somaxconn is clamped: the listeners at the limit (address,
    /// namespace, max_qlen), and how many listeners have TFO on.
    Clamped { at_limit: Vec<(SocketAddr, String, u32)>, tfo_listeners: usize },
    /// Lesson 4: a key not persisted is regenerated at reboot.
    KeyPersisted(KeyPersistence),
    /// Lesson 5: blackhole detection off where clients use TFO: those namespaces.
    BlackholeOff(Vec<String>),
    /// Lesson 6: syncookies skip TFO. `mode`: the namespaces serving TFO with
    /// tcp_syncookies=2; `sent`: those whose listeners answered SYNs with syncookies (their
    /// counters since the namespace was made: a SYN flood, with 1).
    Syncookies { mode: Vec<String>, sent: Vec<(String, ListenCounters)> },
}

impl Found {
    /// Whether the lesson holds here (its advice does not apply): what it found is all
    /// it takes.
    fn holds(&self) -> bool {
        match self {
            Found::SysctlPerNamespace(values) => {
                values.iter().map(|(v, _)| *v).collect::<BTreeSet<u32>>().len() <= 1
            }
            Found::MissedListen(missed) => missed.is_empty(),
            Found::Clamped { at_limit, .. } => at_limit.is_empty(),
            Found::KeyPersisted(p) => !matches!(p, KeyPersistence::NotPersisted(_)),
            Found::BlackholeOff(off) => off.is_empty(),
            Found::Syncookies { mode, sent } => mode.is_empty() && sent.is_empty(),
        }
    }
}

impl From<Found> for Check {
    fn from(found: Found) -> Check {
        Check { ok: found.holds(), found }
    }
}

/// Where TFO servers keep their key across a reboot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPersistence {
    /// The namespaces (labels) whose server key is not persisted.
    NotPersisted(Vec<String>),
    /// No server key left unpersisted: these files set the initial namespace's at boot.
    SetAtBoot(Vec<String>),
    /// No namespace serves TFO, and no file sets a key.
    NoServer,
}

/// The six lessons, checked against this host (pure).
pub(crate) fn checks(
    namespaces: &[TfoNamespace],
    listeners: &[TfoListener],
    key_files: &[String],
) -> Vec<Check> {
    let mut out = Vec::new();

    // 1. The sysctl is per network namespace.
    let values: Vec<(u32, String)> =
        namespaces.iter().filter_map(|n| n.tcp_fastopen.as_ref().ok().map(|v| (v.0, n.label()))).collect();
    out.push(Found::SysctlPerNamespace(values).into());

    // 2. 0x400 is read only at listen().
    let missed: Vec<(SocketAddr, String)> = listeners
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
        .map(|l| (l.addr, l.namespace.clone()))
        .collect();
    out.push(Found::MissedListen(missed).into());

    // 3. fastopen= above somaxconn is clamped.
    let at_limit: Vec<(SocketAddr, String, u32)> = listeners
        .iter()
        .filter_map(|l| match (&l.max_qlen, l.somaxconn) {
            (Ok(q), Some(s)) if *q > 0 && *q >= s => Some((l.addr, l.namespace.clone(), *q)),
            _ => None,
        })
        .collect();
    let tfo_listeners = listeners.iter().filter(|l| matches!(l.max_qlen, Ok(q) if q > 0)).count();
    out.push(Found::Clamped { at_limit, tfo_listeners }.into());

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
    let persistence = match (unpersisted.is_empty(), init_persisted) {
        (true, true) => KeyPersistence::SetAtBoot(key_files.to_vec()),
        (true, false) => KeyPersistence::NoServer,
        (false, _) => KeyPersistence::NotPersisted(unpersisted),
    };
    out.push(Found::KeyPersisted(persistence).into());

    // 5. Blackhole detection is off by default since 5.14; it matters where clients use TFO.
    let client = |n: &&TfoNamespace| n.tcp_fastopen.as_ref().is_ok_and(|v| v.client_enabled());
    let off: Vec<String> = namespaces
        .iter()
        .filter(client)
        .filter(|n| matches!(n.blackhole_timeout_sec, Ok(0)))
        .map(|n| n.label())
        .collect();
    out.push(Found::BlackholeOff(off).into());

    // 6. A SYN answered with a syncookie skips TFO (tcp_conn_request(): no
    // tcp_try_fastopen() when want_cookie, tcp_input.c:7371-7373 in 6.12), and no TFO
    // counter says so: tcp_syncookies=2, or a flood's SyncookiesSent with 1.
    let serving = || namespaces.iter().filter(|n| n.tcp_fastopen.as_ref().is_ok_and(|v| v.server_enabled()));
    let mode: Vec<String> = serving().filter(|n| matches!(n.syncookies, Ok(2))).map(|n| n.label()).collect();
    let sent: Vec<(String, ListenCounters)> = serving()
        .filter(|n| !matches!(n.syncookies, Ok(2)))
        .filter_map(|n| match &n.listen_counters {
            Ok(c) if c.syncookies_sent > 0 => Some((n.label(), *c)),
            _ => None,
        })
        .collect();
    out.push(Found::Syncookies { mode, sent }.into());
    out
}

/// Six lessons checked on fixed facts, as tests here and in `views::doctor` use them.
#[cfg(test)]
pub(crate) mod samples {
    use super::*;
    use crate::{
        diagnosis::sample_facts,
        kernel::sysctl::{FastopenKeyStatus, TcpFastopen},
    };

    pub(crate) fn listener(
        ns: &TfoNamespace,
        addr: &str,
        max_qlen: Result<u32, String>,
        somaxconn: u32,
    ) -> TfoListener {
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

    /// `sample_facts` with two TFO listeners in srv, one at somaxconn.
    pub(crate) fn on_sample_facts() -> Vec<Check> {
        let f = sample_facts();
        let srv = &f.namespaces[1];
        let listeners =
            [listener(srv, "0.0.0.0:443", Ok(4096), 4096), listener(srv, "0.0.0.0:80", Ok(16), 4096)];
        checks(&f.namespaces, &listeners, &[])
    }

    /// A server only in the current namespace: syncookies=2, blackhole detection off.
    pub(crate) fn on_a_syncookie_server() -> Vec<Check> {
        let mut f = sample_facts();
        f.namespaces[0].tcp_fastopen = Ok(TcpFastopen(0x2));
        f.namespaces[0].syncookies = Ok(2);
        checks(&f.namespaces, &[], &[])
    }

    /// The host itself is the server, its key set at boot, one listener that missed 0x400.
    pub(crate) fn on_a_host_that_serves() -> Vec<Check> {
        let mut f = sample_facts();
        f.namespaces[0].tcp_fastopen = Ok(TcpFastopen(0x403));
        f.namespaces[0].key = Ok(FastopenKeyStatus { primary: true, backup: false });
        f.namespaces.truncate(1);
        let cur = &f.namespaces[0];
        let listeners =
            [listener(cur, "0.0.0.0:8080", Ok(0), 4096), listener(cur, "0.0.0.0:22", Err("x".into()), 4096)];
        checks(&f.namespaces, &listeners, &["/etc/sysctl.d/tfo.conf".to_string()])
    }
}

#[cfg(test)]
mod tests {
    use super::{samples::*, *};
    use crate::{diagnosis::sample_facts, kernel::sysctl::TcpFastopen};

    fn labels(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn six_lessons_on_fixed_facts() {
        let c = on_sample_facts();
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            c,
            [
                Check {
                    ok: false,
                    found: Found::SysctlPerNamespace(vec![(0x1, "current".into()), (0x403, "srv".into())])
                },
                Check { ok: true, found: Found::MissedListen(vec![]) },
                Check {
                    ok: false,
                    found: Found::Clamped {
                        at_limit: vec![(addr("0.0.0.0:443"), "srv".into(), 4096)],
                        tfo_listeners: 2
                    }
                },
                Check {
                    ok: false,
                    found: Found::KeyPersisted(KeyPersistence::NotPersisted(labels(&["srv"])))
                },
                Check { ok: false, found: Found::BlackholeOff(labels(&["current"])) },
                Check { ok: true, found: Found::Syncookies { mode: vec![], sent: vec![] } },
            ]
        );
    }

    /// Issue 37: a namespace that only serves is not told about client settings, and one
    /// whose listeners answer every SYN with a syncookie is told that TFO is skipped there.
    #[test]
    fn client_lessons_only_where_clients_use_tfo_and_syncookies_said() {
        let mut f = sample_facts();
        f.namespaces[0].tcp_fastopen = Ok(TcpFastopen(0x2));
        let c = checks(&f.namespaces, &[], &[]);
        assert_eq!(c[4], Check { ok: true, found: Found::BlackholeOff(vec![]) }, "no TFO client here: {c:?}");
        let none = Found::Syncookies { mode: vec![], sent: vec![] };
        assert_eq!(c[5], Check { ok: true, found: none }, "syncookies 1 here");
        let c = on_a_syncookie_server();
        assert_eq!(c[4], Check { ok: true, found: Found::BlackholeOff(vec![]) }, "{c:?}");
        assert_eq!(
            c[5],
            Check { ok: false, found: Found::Syncookies { mode: labels(&["current"]), sent: vec![] } }
        );
        // With 1, a flood's syncookies: the namespace and its counters.
        let flood = ListenCounters { syncookies_sent: 40, listen_overflows: 2, listen_drops: 3 };
        f.namespaces[0].listen_counters = Ok(flood);
        let c = checks(&f.namespaces, &[], &[]);
        assert_eq!(
            c[5],
            Check {
                ok: false,
                found: Found::Syncookies { mode: vec![], sent: vec![("current".into(), flood)] }
            }
        );
    }

    #[test]
    fn a_listener_that_missed_0x400_and_a_persisted_key() {
        let c = on_a_host_that_serves();
        assert_eq!(
            c[1],
            Check {
                ok: false,
                found: Found::MissedListen(vec![("0.0.0.0:8080".parse().unwrap(), "current".into())])
            }
        );
        assert!(c[0].ok, "one namespace, one value");
        assert_eq!(
            c[3],
            Check {
                ok: true,
                found: Found::KeyPersisted(KeyPersistence::SetAtBoot(labels(&["/etc/sysctl.d/tfo.conf"])))
            }
        );
        assert_eq!(c[2], Check { ok: true, found: Found::Clamped { at_limit: vec![], tfo_listeners: 0 } });
    }

    #[test]
    fn no_server_no_key_lesson() {
        let mut f = sample_facts();
        f.namespaces.truncate(1);
        let c = checks(&f.namespaces, &[], &[]);
        assert_eq!(c[3], Check { ok: true, found: Found::KeyPersisted(KeyPersistence::NoServer) });
        assert_eq!(c.len(), 6);
    }
}
