//! DNS messages (RFC 1035 section 4) as far as `--names` needs them: from a response, each
//! address its answer section gives (A, AAAA), the name the client asked for (the question,
//! so a CNAME chain is named by where it started) and how long the answer may be kept.
//! Everything read is bounded by the message: a malformed one gives nothing, never a panic.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const TYPE_A: u16 = 1;
const TYPE_CNAME: u16 = 5;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
/// A name is at most 255 bytes on the wire (RFC 1035 2.3.4); compression pointers may not
/// loop, so a name that follows more of them than this is refused.
const MAX_POINTERS: usize = 32;
/// More records than a resolver sends in one answer: what a garbled count would make us walk.
const MAX_RECORDS: usize = 256;

/// One address a response gave for a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The name asked for, lower case (`api.partner.example`), before any CNAME.
    pub name: String,
    pub addr: IpAddr,
    /// Seconds the answer may be kept: the least TTL on the way from the name to the address.
    pub ttl: u32,
}

/// The addresses of a DNS response `msg` (the payload of a UDP datagram from port 53, or one
/// message of a TCP stream without its length prefix). Nothing for a query, an error
/// response, a truncated or malformed message, or one with no question.
pub(crate) fn answers(msg: &[u8]) -> Vec<Answer> {
    parse(msg).unwrap_or_default()
}

fn parse(msg: &[u8]) -> Option<Vec<Answer>> {
    let header = msg.get(..12)?;
    let flags = u16::from_be_bytes([header[2], header[3]]);
    let is_response = flags & 0x8000 != 0;
    let opcode = (flags >> 11) & 0xf;
    let rcode = flags & 0xf;
    let count = |i: usize| usize::from(u16::from_be_bytes([header[i], header[i + 1]]));
    let (questions, answer_count) = (count(4), count(6));
    if !is_response || opcode != 0 || rcode != 0 || questions != 1 || answer_count > MAX_RECORDS {
        return None;
    }
    let (asked, mut at) = read_name(msg, 12)?;
    at = at.checked_add(4).filter(|&end| end <= msg.len())?; // QTYPE, QCLASS

    // The answer section: CNAMEs (owner -> target) and addresses, each with its TTL.
    let mut aliases: Vec<(String, String, u32)> = Vec::new();
    let mut addrs: Vec<(String, IpAddr, u32)> = Vec::new();
    for _ in 0..answer_count {
        let (owner, after_name) = read_name(msg, at)?;
        let fixed = msg.get(after_name..after_name + 10)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let class = u16::from_be_bytes([fixed[2], fixed[3]]);
        let ttl = u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
        let len = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let data_at = after_name + 10;
        let data = msg.get(data_at..data_at + len)?;
        at = data_at + len;
        if class != CLASS_IN {
            continue;
        }
        match (rtype, data.len()) {
            (TYPE_A, 4) => {
                addrs.push((owner, IpAddr::V4(Ipv4Addr::new(data[0], data[1], data[2], data[3])), ttl))
            }
            (TYPE_AAAA, 16) => {
                let octets: [u8; 16] = data.try_into().ok()?;
                addrs.push((owner, IpAddr::V6(Ipv6Addr::from(octets)), ttl));
            }
            (TYPE_CNAME, _) => aliases.push((owner, read_name(msg, data_at)?.0, ttl)),
            _ => {}
        }
    }

    // Follow the chain from the name asked for: each address whose owner it reaches is the
    // asked name's, kept no longer than the shortest TTL on the way.
    let mut reached: Vec<(String, u32)> = vec![(asked.clone(), u32::MAX)];
    let mut i = 0;
    while i < reached.len() && reached.len() <= MAX_RECORDS {
        let (from, ttl) = reached[i].clone();
        for (owner, target, alias_ttl) in &aliases {
            if *owner == from && !reached.iter().any(|(n, _)| n == target) {
                reached.push((target.clone(), ttl.min(*alias_ttl)));
            }
        }
        i += 1;
    }
    Some(
        addrs
            .into_iter()
            .filter_map(|(owner, addr, ttl)| {
                let (_, chain_ttl) = reached.iter().find(|(n, _)| *n == owner)?;
                Some(Answer { name: asked.clone(), addr, ttl: ttl.min(*chain_ttl) })
            })
            .collect(),
    )
}

/// The name at `at` (following compression pointers), lower case, dot-separated, without
/// the root's dot (`.` for the root itself), bytes other than letters, digits, `-` and `_`
/// written `\DDD` (RFC 4343) so that no name can carry control characters into a terminal;
/// and where the record continues after it.
fn read_name(msg: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut name = String::new();
    let mut resume = None;
    let mut pointers = 0;
    loop {
        let len = *msg.get(at)?;
        match len & 0xc0 {
            0x00 if len == 0 => {
                if name.is_empty() {
                    name.push('.');
                }
                return Some((name, resume.unwrap_or(at + 1)));
            }
            0x00 => {
                let label = msg.get(at + 1..at + 1 + usize::from(len))?;
                if !name.is_empty() {
                    name.push('.');
                }
                for &b in label {
                    match b.to_ascii_lowercase() {
                        c @ (b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_') => name.push(char::from(c)),
                        other => name.push_str(&format!("\\{other:03}")),
                    }
                }
                if name.len() > 1024 {
                    return None;
                }
                at += 1 + usize::from(len);
            }
            0xc0 => {
                pointers += 1;
                if pointers > MAX_POINTERS {
                    return None;
                }
                let low = *msg.get(at + 1)?;
                resume.get_or_insert(at + 2);
                at = usize::from(u16::from_be_bytes([len & 0x3f, low]));
            }
            _ => return None, // 0x40 and 0x80: extended label types, obsolete
        }
    }
}

/// A DNS message for the tests: a response to `name` with these answer records (`(owner,
/// type, ttl, rdata)`), names uncompressed.
#[cfg(test)]
pub(crate) fn response(name: &str, records: &[(&str, u16, u32, Vec<u8>)]) -> Vec<u8> {
    let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, records.len() as u8, 0, 0, 0, 0];
    m.extend(encode_name(name));
    m.extend([0, 1, 0, 1]);
    for (owner, rtype, ttl, data) in records {
        m.extend(encode_name(owner));
        m.extend(rtype.to_be_bytes());
        m.extend(CLASS_IN.to_be_bytes());
        m.extend(ttl.to_be_bytes());
        m.extend((data.len() as u16).to_be_bytes());
        m.extend(data);
    }
    m
}

#[cfg(test)]
pub(crate) fn encode_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend(label.as_bytes());
    }
    out.push(0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(addr: [u8; 4]) -> Vec<u8> {
        addr.to_vec()
    }

    #[test]
    fn an_a_answer_names_its_address() {
        let msg = response("API.Example", &[("api.example", TYPE_A, 300, a([198, 18, 0, 3]))]);
        assert_eq!(
            answers(&msg),
            vec![Answer { name: "api.example".into(), addr: "198.18.0.3".parse().unwrap(), ttl: 300 }]
        );
    }

    #[test]
    fn a_cname_chain_is_named_by_the_name_asked_for_with_its_least_ttl() {
        let v6: std::net::Ipv6Addr = "fd00::3".parse().unwrap();
        let msg = response(
            "www.example",
            &[
                ("www.example", TYPE_CNAME, 60, encode_name("edge.cdn.example")),
                ("edge.cdn.example", TYPE_CNAME, 3600, encode_name("pop1.cdn.example")),
                ("pop1.cdn.example", TYPE_AAAA, 120, v6.octets().to_vec()),
                // Not on the chain: not the asked name's.
                ("other.example", TYPE_A, 300, a([10, 0, 0, 1])),
            ],
        );
        assert_eq!(answers(&msg), vec![Answer { name: "www.example".into(), addr: IpAddr::V6(v6), ttl: 60 }]);
    }

    #[test]
    fn compression_pointers_are_followed_and_loops_refused() {
        // The answer's owner and the CNAME target point back into the question.
        let mut msg = response("svc.example", &[]);
        msg[7] = 2;
        msg.extend([0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 30, 0, 6, 3, b'w', b'e', b'b', 0xc0, 16]);
        msg.extend([3, b'w', b'e', b'b', 0xc0, 16, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 192, 0, 2, 1]);
        let got = answers(&msg);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].name.as_str(), got[0].addr.to_string()), ("svc.example", "192.0.2.1".into()));

        let mut looping = response("x", &[]);
        looping[12..15].copy_from_slice(&[0xc0, 12, 0]); // the question's name points at itself
        assert!(answers(&looping).is_empty());
    }

    #[test]
    fn queries_errors_and_garbage_give_nothing() {
        let good = response("a.example", &[("a.example", TYPE_A, 5, a([192, 0, 2, 9]))]);
        let mut query = good.clone();
        query[2] &= 0x7f;
        let mut nxdomain = good.clone();
        nxdomain[3] |= 3;
        assert!(answers(&query).is_empty() && answers(&nxdomain).is_empty());
        for cut in 0..good.len() {
            assert!(answers(&good[..cut]).is_empty(), "cut at {cut}");
        }
        // Every single-byte corruption parses to something or nothing, never a panic.
        for i in 0..good.len() {
            for b in [0u8, 0x3f, 0xc0, 0xff] {
                let mut bad = good.clone();
                bad[i] = b;
                let _ = answers(&bad);
            }
        }
    }

    #[test]
    fn odd_bytes_in_a_name_are_escaped() {
        let msg = response("a\x1b[2J.example", &[("a\x1b[2J.example", TYPE_A, 5, a([192, 0, 2, 9]))]);
        assert_eq!(answers(&msg)[0].name, "a\\027\\0912j.example");
    }
}
