//! What a verdict says ([`Said`]), and the line every row of a report of several hosts
//! adds: how many of them show it, and a site they share.
use crate::{aggregation::report::verdict::HostShare, units};

/// A verdict said: one plain sentence (what happens and what to do), and the facts it rests
/// on, one per line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Said {
    pub sentence: String,
    pub evidence: Vec<String>,
}

/// A name that hosts that show a verdict share and the others do not: a domain
/// (`*.ams1.example.net`) or a name prefix (`web-ams-*`). "All in one site" is often the
/// whole diagnosis.
fn shared_site(showing: &[&str], others: &[&str]) -> Option<String> {
    if showing.len() < 2 {
        return None;
    }
    // The longest domain every one of them ends with (labels after the host's own).
    let domain = |h: &str| h.split_once('.').map(|(_, d)| d.to_string());
    let mut common: Option<String> = domain(showing[0]);
    for h in &showing[1..] {
        let (Some(c), Some(d)) = (&common, domain(h)) else {
            return None.or_else(|| prefix_site(showing, others));
        };
        let a: Vec<&str> = c.rsplit('.').collect();
        let b: Vec<&str> = d.rsplit('.').collect();
        let n = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        common = (n > 0).then(|| a[..n].iter().rev().copied().collect::<Vec<_>>().join("."));
    }
    if let Some(d) = common.filter(|d| d.contains('.') || !d.is_empty()) {
        if !others.iter().any(|o| o.ends_with(&format!(".{d}"))) {
            return Some(format!("*.{d}"));
        }
    }
    prefix_site(showing, others)
}

fn prefix_site(showing: &[&str], others: &[&str]) -> Option<String> {
    let first = showing[0];
    let mut n = first.len();
    for h in &showing[1..] {
        n = n.min(first.bytes().zip(h.bytes()).take_while(|(a, b)| a == b).count());
    }
    // Cut back to a separator: `web-ams-` of `web-ams-1` and `web-ams-2`, not `web-ams-1`.
    let cut = first[..n].rfind(['-', '.', '_']).map(|i| i + 1)?;
    let p = &first[..cut];
    (cut > 1 && !others.iter().any(|o| o.starts_with(p))).then(|| format!("{p}*"))
}

/// How many hosts show it, the first few named, and a site they share if they do.
pub(super) fn hosts_line(hosts: &[HostShare]) -> String {
    const NAMED: usize = 3;
    let showing: Vec<&HostShare> = hosts.iter().filter(|h| h.showing > 0).collect();
    let mut line = format!(
        "hosts: {} of {} show it",
        units::count(showing.len() as u64),
        units::count(hosts.len() as u64)
    );
    if showing.is_empty() {
        return line;
    }
    let named: Vec<String> = showing
        .iter()
        .take(NAMED)
        .map(|h| format!("{} ({} of {})", h.host, units::count(h.showing), units::count(h.connections)))
        .collect();
    line.push_str(&format!(": {}", named.join(", ")));
    if showing.len() > NAMED {
        line.push_str(&format!(" and {} more", units::count((showing.len() - NAMED) as u64)));
    }
    let names: Vec<&str> = showing.iter().map(|h| h.host.as_str()).collect();
    let others: Vec<&str> = hosts.iter().filter(|h| h.showing == 0).map(|h| h.host.as_str()).collect();
    if let Some(site) = shared_site(&names, &others) {
        line.push_str(&format!("; all of them {site}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_sites_of_the_hosts_that_show_it() {
        assert_eq!(
            shared_site(&["web-1.ams1.example.net", "web-2.ams1.example.net"], &["web-3.fra1.example.net"]),
            Some("*.ams1.example.net".into())
        );
        assert_eq!(shared_site(&["web-ams-1", "web-ams-2"], &["web-fra-1"]), Some("web-ams-*".into()));
        assert_eq!(shared_site(&["web-ams-1"], &["web-fra-1"]), None, "one host is no site");
        assert_eq!(shared_site(&["a-1", "b-1"], &[]), None);
    }
}
