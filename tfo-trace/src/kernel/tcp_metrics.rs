//! The kernel's per-destination TCP metrics cache (`ip tcp_metrics show`), where the client
//! side of TFO keeps its state per destination address: the cookie the server gave
//! (`fo_cookie`), the MSS to size SYN-data with (`fo_mss`), and how many SYNs carrying data
//! were lost on the way (`fo_syn_drops`, with the time of the last loss). The cache is per
//! network namespace. The kernel fills it from tcp_fastopen_cache_set() (net/ipv4/tcp_metrics.c).
//!
//! [`parse`] is pure; [`read`] runs `ip [-n NAME] tcp_metrics show`. Only the cookie's
//! length is kept: the cookie itself never leaves [`parse`].
use std::{net::IpAddr, process::Command};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use crate::kernel::{ser_result, sysctl::TfoNamespace};

/// The TFO part of one `ip tcp_metrics` entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TcpMetric {
    pub dst: IpAddr,
    /// The local address the entry is kept for (`source`), when shown.
    pub source: Option<IpAddr>,
    /// Seconds since the entry was last updated.
    pub age_s: Option<f64>,
    /// MSS the server announced, used to size SYN-data.
    pub fo_mss: Option<u32>,
    /// SYN-data lost towards this destination (the kernel resets it when a SYN-data is
    /// acknowledged again).
    pub fo_syn_drops: u32,
    /// Seconds since the last SYN-data loss.
    pub fo_syn_drop_age_s: Option<f64>,
    /// Length in bytes of the cached cookie; None = no cookie. The cookie is never kept.
    pub cookie_len: Option<usize>,
}

impl TcpMetric {
    /// The cookie, redacted: `present (8 bytes)` or `none`.
    pub fn cookie_redacted(&self) -> String {
        match self.cookie_len {
            Some(n) => format!("present ({n} bytes)"),
            None => "none".into(),
        }
    }

    /// Whether the entry holds TFO state: a cookie, fo_mss or SYN-data losses.
    pub fn has_tfo_state(&self) -> bool {
        self.cookie_len.is_some() || self.fo_mss.is_some() || self.fo_syn_drops > 0
    }
}

/// `ip tcp_metrics` of one namespace.
#[derive(Debug, Clone, Serialize)]
pub struct NamespaceTcpMetrics {
    /// The namespace label as in the namespace sections ("current", "NAME", ...).
    pub namespace: String,
    pub inode: Option<u64>,
    /// Entries with TFO state only (a cookie, fo_mss or fo_syn_drops); cookies redacted.
    #[serde(serialize_with = "ser_result")]
    pub entries: Result<Vec<TcpMetric>, String>,
}

/// `0.014usec`, `14.148sec`, `250msec` -> seconds.
///
/// iproute2 since its JSON rework (4.17; 6.1 on this project's machine) prints the age of the
/// last SYN-data loss as the kernel's milliseconds divided by 10^6 and labels it `usec`: an
/// entry whose `age` was 14.144 s showed `fo_syn_drops 2/0.014usec ago` (and
/// `"fopen_syn_drop_ts": 0.014148` with `-j`). So `usec` here means thousands of seconds.
/// Older iproute2 printed `%llu.%03llusec` (seconds), which is parsed as such.
fn drop_age_seconds(text: &str) -> Option<f64> {
    let text = text.trim_end_matches("ago").trim();
    let (num, scale) = if let Some(n) = text.strip_suffix("usec") {
        (n, 1000.0)
    } else if let Some(n) = text.strip_suffix("msec") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("sec") {
        (n, 1.0)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * scale)
}

fn seconds(text: &str) -> Option<f64> {
    text.strip_suffix("sec")?.parse().ok()
}

/// Parses the text of `ip tcp_metrics show`, one entry per line:
///
/// ```text
/// 198.18.77.3 age 14.144sec cwnd 12 rtt 877us rttvar 722us fo_mss 1460 fo_syn_drops 2/0.014usec ago fo_cookie f6a9b1931644f2a3 source 198.18.77.1
/// ```
///
/// Entries without TFO fields are kept (fo_syn_drops 0, no cookie). Unknown keys are
/// skipped; a line whose first word is not an address is an error naming the line.
pub fn parse(text: &str) -> Result<Vec<TcpMetric>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(first) = words.first() else { continue };
        let dst: IpAddr = match first.parse() {
            Ok(a) => a,
            Err(_) => bail!("ip tcp_metrics line {}: {first:?} is not an address", i + 1),
        };
        let mut m = TcpMetric {
            dst,
            source: None,
            age_s: None,
            fo_mss: None,
            fo_syn_drops: 0,
            fo_syn_drop_age_s: None,
            cookie_len: None,
        };
        let mut w = 1;
        while w < words.len() {
            let value = words.get(w + 1).copied().unwrap_or("");
            match words[w] {
                "age" => m.age_s = seconds(value),
                "source" => m.source = value.parse().ok(),
                "fo_mss" => m.fo_mss = value.parse().ok(),
                "fo_cookie" => {
                    let hex = value.trim_end_matches(|c: char| !c.is_ascii_hexdigit());
                    m.cookie_len = (!hex.is_empty()).then_some(hex.len() / 2);
                }
                "fo_syn_drops" => {
                    // `N/AGE ago`: the age and the word `ago`.
                    let (n, age) = value.split_once('/').unwrap_or((value, ""));
                    m.fo_syn_drops = n.parse().unwrap_or(0);
                    m.fo_syn_drop_age_s = drop_age_seconds(age);
                    if words.get(w + 2) == Some(&"ago") {
                        w += 1;
                    }
                }
                "tw_ts" if words.get(w + 2) == Some(&"ago") => w += 1,
                _ => {}
            }
            w += 2;
        }
        out.push(m);
    }
    Ok(out)
}

/// `ip tcp_metrics show` in the current namespace, or with `netns` in that named one
/// (`ip -n NAME`). Needs CAP_NET_ADMIN only to change entries, not to read them.
pub fn read(netns: Option<&str>) -> Result<Vec<TcpMetric>> {
    let mut c = Command::new("ip");
    if let Some(ns) = netns {
        c.args(["-n", ns]);
    }
    c.args(["tcp_metrics", "show"]);
    let where_ = netns.map(|n| format!(" -n {n}")).unwrap_or_default();
    let out = c.output().with_context(|| format!("running `ip{where_} tcp_metrics show` (iproute2)"))?;
    if !out.status.success() {
        bail!("`ip{where_} tcp_metrics show` failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    parse(&String::from_utf8_lossy(&out.stdout))
}

/// [`read`] in `ns`: the current namespace, or a named one (one without a name cannot be
/// entered by name).
pub fn read_in(ns: &TfoNamespace) -> Result<Vec<TcpMetric>, String> {
    read(ns.ip_netns_name()?).map_err(|e| format!("{e:#}"))
}

/// The entries with TFO state of every namespace in `namespaces`.
pub fn per_namespace(namespaces: &[TfoNamespace]) -> Vec<NamespaceTcpMetrics> {
    namespaces
        .iter()
        .map(|ns| NamespaceTcpMetrics {
            namespace: ns.label(),
            inode: ns.inode,
            entries: read_in(ns).map(|v| v.into_iter().filter(TcpMetric::has_tfo_state).collect()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on the project machine (Linux 6.18, iproute2 6.1) in a client namespace
    /// after real lab traffic: 3 TFO connections to .2, 2 over IPv6, 1 to .3 and then 2
    /// whose SYN-data an nft rule dropped (the entry's age was 14.144 s).
    const CLIENT_SIDE: &str = "\
198.18.77.2 age 16.228sec cwnd 12 rtt 40us rttvar 40us fo_mss 1460 fo_cookie 05180fe5bb8b6b2e source 198.18.77.1
fd00:77::2 age 16.224sec cwnd 12 rtt 50us rttvar 50us fo_mss 1440 fo_cookie 9dc328e7e994f7f5 source fd00:77::1
198.18.77.3 age 14.144sec cwnd 12 rtt 877us rttvar 722us fo_mss 1460 fo_syn_drops 2/0.014usec ago fo_cookie f6a9b1931644f2a3 source 198.18.77.1
";
    /// The server namespace of the same run: no TFO state on that side.
    const SERVER_SIDE: &str = "\
198.18.77.1 age 0.004sec cwnd 12 rtt 112us rttvar 174us source 198.18.77.3
198.18.77.1 age 2.088sec cwnd 12 rtt 23us rttvar 22us source 198.18.77.2
fd00:77::1 age 2.084sec cwnd 12 rtt 27us rttvar 27us source fd00:77::2
";

    #[test]
    fn parses_captured_client_side() {
        let m = parse(CLIENT_SIDE).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].dst, "198.18.77.2".parse::<IpAddr>().unwrap());
        assert_eq!(m[0].source, Some("198.18.77.1".parse().unwrap()));
        assert_eq!(m[0].age_s, Some(16.228));
        assert_eq!(m[0].fo_mss, Some(1460));
        assert_eq!(m[0].cookie_len, Some(8));
        assert_eq!(m[0].fo_syn_drops, 0);
        assert_eq!(m[1].dst, "fd00:77::2".parse::<IpAddr>().unwrap());
        assert_eq!(m[1].fo_mss, Some(1440));
        assert_eq!(m[2].fo_syn_drops, 2);
        let age = m[2].fo_syn_drop_age_s.unwrap();
        assert!((age - 14.0).abs() < 0.01, "usec means ks here: {age}");
        assert_eq!(m[2].source, Some("198.18.77.1".parse().unwrap()), "parsing went on after `ago`");
    }

    #[test]
    fn parses_captured_server_side_and_never_keeps_the_cookie() {
        let m = parse(SERVER_SIDE).unwrap();
        assert_eq!(m.len(), 3);
        assert!(m.iter().all(|e| e.cookie_len.is_none() && e.fo_syn_drops == 0 && e.fo_mss.is_none()));
        let all = format!(
            "{:?}{}",
            parse(CLIENT_SIDE).unwrap(),
            serde_json::to_string(&parse(CLIENT_SIDE).unwrap()).unwrap()
        );
        assert!(!all.contains("05180fe5"), "cookie material must not survive parsing");
        assert_eq!(parse(CLIENT_SIDE).unwrap()[0].cookie_redacted(), "present (8 bytes)");
    }

    #[test]
    fn old_iproute2_units_and_bad_lines() {
        let m =
            parse("10.0.0.1 age 3.000sec tw_ts 1/2sec ago fo_syn_drops 1/12.500sec ago fo_cookie 00112233\n")
                .unwrap();
        assert_eq!(m[0].fo_syn_drop_age_s, Some(12.5));
        assert_eq!(m[0].cookie_len, Some(4));
        assert_eq!(drop_age_seconds("250msec"), Some(0.25));
        assert_eq!(drop_age_seconds("soon"), None);
        assert!(parse("").unwrap().is_empty());
        let e = parse("10.0.0.1 age 1sec\nError: something\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }
}
