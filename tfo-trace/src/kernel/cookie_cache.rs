//! The client's TFO cookie cache of one network namespace (the kernel's tcp_metrics, where
//! tcp_fastopen_cache_set() keeps the cookie each destination address gave), read over its
//! generic netlink family `tcp_metrics` (include/uapi/linux/tcp_metrics.h): what tells why a
//! SYN-data was refused on backends where no hook sees the SYN-ACK.
//!
//! An entry is kept per source and destination address (tcp_get_metrics() looks it up by
//! saddr, daddr and namespace, net/ipv4/tcp_metrics.c): a client with several addresses (a
//! multi-homed host, IPv6 temporary addresses, a socket bound to one) holds a cookie per
//! source. A look-up is by both ([`CookieCache::cookie`]); one without the source would be
//! answered with the first entry of the destination's hash chain, whichever source it is
//! for (tcp_metrics_nl_cmd_get: `!src ||`). A cookie's bytes never
//! leave this module: each is hashed at once ([`tfo_trace_common::cookie_hash`], under the
//! tracer run's key), so only hashes are compared, counted or recorded.
//!
//! A netlink socket belongs to the namespace it was made in: [`CookieCache::open`] makes one
//! in the calling thread's namespace (a helper thread that entered another namespace with
//! setns makes that namespace's: `kernel::every_netns::run_in_each`).
use std::net::IpAddr;

use anyhow::{anyhow, bail, Context as _, Result};
use neli::{
    consts::{
        genl::{CtrlAttr, CtrlCmd},
        nl::{GenlId, NlmF},
        socket::NlFamily,
    },
    genl::{AttrTypeBuilder, Genlmsghdr, GenlmsghdrBuilder, NlattrBuilder},
    neli_enum,
    nl::{NlPayload, NlmsghdrBuilder},
    socket::synchronous::NlSocketHandle,
    types::{Buffer, GenlBuffer},
    utils::Groups,
};

/// TCP_METRICS_CMD_* (uapi/linux/tcp_metrics.h).
#[neli_enum(serialized_type = "u8")]
pub enum MetricsCmd {
    Unspec = 0,
    Get = 1,
}
impl neli::consts::genl::Cmd for MetricsCmd {}

/// TCP_METRICS_ATTR_* (uapi/linux/tcp_metrics.h): the ones read or sent here.
#[neli_enum(serialized_type = "u16")]
pub enum MetricsAttr {
    Unspec = 0,
    AddrIpv4 = 1,
    AddrIpv6 = 2,
    FopenCookie = 10,
    SaddrIpv4 = 11,
    SaddrIpv6 = 12,
}
impl neli::consts::genl::NlAttrType for MetricsAttr {}

type Reply = Genlmsghdr<MetricsCmd, MetricsAttr>;

/// The cookie cache of one namespace, through a netlink socket made in it.
pub(crate) struct CookieCache {
    socket: NlSocketHandle,
    family: u16,
    seq: u32,
}

impl CookieCache {
    /// A socket into the cookie cache of the calling thread's namespace.
    pub(crate) fn open() -> Result<CookieCache> {
        let socket = NlSocketHandle::connect(NlFamily::Generic, None, Groups::empty())
            .context("opening a generic netlink socket")?;
        let family = family_id(&socket)?;
        Ok(CookieCache { socket, family, seq: 0 })
    }

    /// The hash of the cookie cached for the source address `saddr` toward `daddr`, None
    /// where the cache holds none (no entry, or an entry without a cookie).
    pub(crate) fn cookie(&mut self, saddr: IpAddr, daddr: IpAddr, key: [u64; 2]) -> Result<Option<u32>> {
        let attrs = [
            address(daddr, MetricsAttr::AddrIpv4, MetricsAttr::AddrIpv6)?,
            address(saddr, MetricsAttr::SaddrIpv4, MetricsAttr::SaddrIpv6)?,
        ];
        let found = self.ask(NlmF::REQUEST, attrs.into_iter().collect(), key)?;
        Ok(found.into_iter().next().and_then(|e| e.hash))
    }

    /// The hash of every cookie the cache holds, by source and destination address.
    pub(crate) fn cookies(&mut self, key: [u64; 2]) -> Result<Vec<(IpAddr, IpAddr, u32)>> {
        let found = self.ask(NlmF::REQUEST | NlmF::DUMP, GenlBuffer::new(), key)?;
        Ok(found.into_iter().filter_map(|e| Some((e.saddr?, e.daddr?, e.hash?))).collect())
    }

    /// Sends one TCP_METRICS_CMD_GET and reads its answers to the end: each entry's
    /// destination and cookie hash. An address the cache has no entry for is ESRCH: none.
    fn ask(
        &mut self,
        flags: NlmF,
        attrs: GenlBuffer<MetricsAttr, Buffer>,
        key: [u64; 2],
    ) -> Result<Vec<Entry>> {
        self.seq = self.seq.wrapping_add(1);
        let payload = GenlmsghdrBuilder::<MetricsCmd, MetricsAttr>::default()
            .cmd(MetricsCmd::Get)
            .version(1)
            .attrs(attrs)
            .build()
            .context("building a tcp_metrics request")?;
        let msg = NlmsghdrBuilder::default()
            .nl_type(self.family)
            .nl_flags(flags)
            .nl_seq(self.seq)
            .nl_payload(NlPayload::Payload(payload))
            .build()
            .context("building a tcp_metrics request")?;
        self.socket.send(&msg).context("asking tcp_metrics")?;
        let dump = flags.contains(NlmF::DUMP);
        let mut out = Vec::new();
        // One answer for a GET; a DUMP ends with NLMSG_DONE. Bounded: a namespace's cache
        // holds at most a few thousand entries, far fewer than this many datagrams.
        for _ in 0..4096 {
            let (msgs, _) = self.socket.recv::<u16, Reply>().context("reading tcp_metrics")?;
            for msg in msgs {
                let msg = msg.context("decoding a tcp_metrics answer")?;
                if *msg.nl_seq() != self.seq {
                    continue; // a late answer to an earlier request
                }
                match msg.nl_payload() {
                    NlPayload::Payload(reply) => {
                        out.push(entry(reply, key));
                        if !dump {
                            return Ok(out);
                        }
                    }
                    NlPayload::Err(e) if *e.error() == -libc::ESRCH => return Ok(out),
                    NlPayload::Err(e) => bail!("tcp_metrics: {e}"),
                    NlPayload::Ack(_) | NlPayload::DumpExtAck(_) | NlPayload::Empty => return Ok(out),
                }
            }
        }
        bail!("tcp_metrics: no end to the answer")
    }
}

/// One answer of tcp_metrics: its addresses and the hash of its cookie.
struct Entry {
    saddr: Option<IpAddr>,
    daddr: Option<IpAddr>,
    hash: Option<u32>,
}

/// One answer's addresses and cookie hash (the cookie hashed here, never kept).
fn entry(reply: &Reply, key: [u64; 2]) -> Entry {
    let attrs = reply.attrs().get_attr_handle();
    let bytes = |a: MetricsAttr| attrs.get_attribute(a).map(|attr| attr.nla_payload().as_ref().to_vec());
    let addr = |v4: MetricsAttr, v6: MetricsAttr| match (bytes(v4), bytes(v6)) {
        (Some(v4), _) => <[u8; 4]>::try_from(v4.as_slice()).ok().map(IpAddr::from),
        (_, Some(v6)) => <[u8; 16]>::try_from(v6.as_slice()).ok().map(IpAddr::from),
        _ => None,
    };
    let hash = bytes(MetricsAttr::FopenCookie).filter(|c| !c.is_empty() && c.len() <= 16).map(|c| {
        // The kernel's 16 bytes (val[2], zero past the cookie), as its programs load them.
        let mut val = [0u8; 16];
        val[..c.len()].copy_from_slice(&c);
        let word = |i: usize| u64::from_le_bytes(val[i..i + 8].try_into().expect("8 bytes"));
        tfo_trace_common::cookie_hash(key, [word(0), word(8)])
    });
    Entry {
        saddr: addr(MetricsAttr::SaddrIpv4, MetricsAttr::SaddrIpv6),
        daddr: addr(MetricsAttr::AddrIpv4, MetricsAttr::AddrIpv6),
        hash,
    }
}

/// An address as the attribute of its family (tcp_metrics keeps an IPv4-mapped one under
/// its IPv4 address).
fn address(a: IpAddr, v4: MetricsAttr, v6: MetricsAttr) -> Result<neli::genl::Nlattr<MetricsAttr, Buffer>> {
    match a.to_canonical() {
        IpAddr::V4(a) => attribute(v4, Buffer::from(a.octets().to_vec())),
        IpAddr::V6(a) => attribute(v6, Buffer::from(a.octets().to_vec())),
    }
}

fn attribute(kind: MetricsAttr, payload: Buffer) -> Result<neli::genl::Nlattr<MetricsAttr, Buffer>> {
    NlattrBuilder::default()
        .nla_type(AttrTypeBuilder::default().nla_type(kind).build().context("a netlink attribute")?)
        .nla_payload(payload)
        .build()
        .context("a netlink attribute")
}

/// The id of the `tcp_metrics` family (CTRL_CMD_GETFAMILY): one per host, whatever the
/// namespace.
fn family_id(socket: &NlSocketHandle) -> Result<u16> {
    let name = NlattrBuilder::default()
        .nla_type(AttrTypeBuilder::default().nla_type(CtrlAttr::FamilyName).build()?)
        .nla_payload("tcp_metrics")
        .build()?;
    let payload = GenlmsghdrBuilder::<CtrlCmd, CtrlAttr>::default()
        .cmd(CtrlCmd::Getfamily)
        .version(2)
        .attrs(std::iter::once(name).collect::<GenlBuffer<_, _>>())
        .build()?;
    let msg = NlmsghdrBuilder::default()
        .nl_type(GenlId::Ctrl)
        .nl_flags(NlmF::REQUEST)
        .nl_payload(NlPayload::Payload(payload))
        .build()?;
    socket.send(&msg).context("asking for the tcp_metrics family")?;
    let (msgs, _) =
        socket.recv::<GenlId, Genlmsghdr<CtrlCmd, CtrlAttr>>().context("reading the tcp_metrics family")?;
    for msg in msgs {
        match msg.context("decoding the tcp_metrics family")?.nl_payload() {
            NlPayload::Payload(p) => {
                return p
                    .attrs()
                    .get_attr_handle()
                    .get_attr_payload_as::<u16>(CtrlAttr::FamilyId)
                    .map_err(|e| anyhow!("the tcp_metrics family's id: {e}"))
            }
            NlPayload::Err(e) => bail!("no tcp_metrics netlink family: {e}"),
            _ => {}
        }
    }
    bail!("no answer about the tcp_metrics netlink family")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This namespace's cache answers, and an address it has no entry for (TEST-NET-1,
    /// never connected to) has no cookie.
    #[test]
    fn reads_this_namespace_and_an_unknown_address_has_no_cookie() {
        let Ok(mut cache) = CookieCache::open() else { return }; // no netlink here: nothing to check
        let key = [1, 2];
        let (src, dst) = ("192.0.2.1".parse().unwrap(), "192.0.2.77".parse().unwrap());
        assert_eq!(cache.cookie(src, dst, key).unwrap(), None);
        cache.cookies(key).unwrap();
    }
}
