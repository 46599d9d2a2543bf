//! The kernel's own SNMP/MIB counters of one network namespace (`/proc/net/netstat`,
//! `/proc/net/snmp`): the ground truth that the tracer's numbers are checked against.
//!
//! Both files are sequences of line pairs, a header line naming the counters and a value
//! line, each starting with the same group tag:
//!
//! ```text
//! TcpExt: SyncookiesSent ... TCPFastOpenActive ...
//! TcpExt: 0 ... 4 ...
//! ```
//!
//! A counter's key is the tag followed by the name, as `nstat` spells it:
//! `TcpExtTCPFastOpenActive`, `TcpRetransSegs`, `TcpExtTCPSynRetrans`.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context as _, Result};

use crate::kernel::{netns, sysctl::TfoNamespace};

/// Counter values by `nstat`-style key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Netstat(pub BTreeMap<String, u64>);

impl Netstat {
    /// Parses the concatenated text of `/proc/net/netstat` and/or `/proc/net/snmp`.
    ///
    /// Negative values are skipped: the only one the kernel prints is the constant
    /// `Tcp: MaxConn -1`, which is not a counter.
    pub fn parse(text: &str) -> Result<Netstat> {
        let mut map = BTreeMap::new();
        let mut lines = text.lines().filter(|l| !l.trim().is_empty()).enumerate();
        while let Some((i, header)) = lines.next() {
            let (tag, names) = split_tag(header)
                .with_context(|| format!("line {}: no `Group:` tag in {header:?}", i + 1))?;
            let Some((j, values_line)) = lines.next() else {
                bail!("line {}: header {tag:?} has no value line", i + 1);
            };
            let (vtag, values) = split_tag(values_line)
                .with_context(|| format!("line {}: no `Group:` tag in {values_line:?}", j + 1))?;
            if vtag != tag {
                bail!("line {}: value line tag {vtag:?} does not match header {tag:?}", j + 1);
            }
            let names: Vec<&str> = names.split_whitespace().collect();
            let values: Vec<&str> = values.split_whitespace().collect();
            if names.len() != values.len() {
                bail!("line {}: {tag} has {} names but {} values", j + 1, names.len(), values.len());
            }
            for (name, value) in names.iter().zip(values) {
                match value.parse::<u64>() {
                    Ok(v) => {
                        map.insert(format!("{tag}{name}"), v);
                    }
                    Err(_) if value.parse::<i64>().is_ok() => {} // e.g. TcpMaxConn -1
                    Err(e) => bail!("line {}: {tag}{name} = {value:?}: {e}", j + 1),
                }
            }
        }
        Ok(Netstat(map))
    }

    /// Reads the counters of the caller's own network namespace.
    pub fn read_current() -> Result<Netstat> {
        Self::read_files(&[Path::new("/proc/net/netstat"), Path::new("/proc/net/snmp")])
    }

    /// Reads and parses the given files (e.g. `/proc/<pid>/net/netstat` of a process in
    /// another namespace).
    pub fn read_files(paths: &[&Path]) -> Result<Netstat> {
        let mut text = String::new();
        for p in paths {
            let t = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            text.push_str(&t);
            text.push('\n');
        }
        Self::parse(&text)
    }

    /// The value of `key`, 0 if the kernel does not have it (older kernels lack some).
    pub fn get(&self, key: &str) -> u64 {
        self.0.get(key).copied().unwrap_or(0)
    }

    /// `after - before` per key (saturating at 0: gauges such as TcpCurrEstab can fall).
    /// Keys only in `after` count from 0.
    pub fn delta(before: &Netstat, after: &Netstat) -> Netstat {
        Netstat(after.0.iter().map(|(k, &v)| (k.clone(), v.saturating_sub(before.get(k)))).collect())
    }

    /// The non-zero entries, for readable diagnostics.
    pub fn nonzero(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().filter(|(_, &v)| v != 0).map(|(k, &v)| (k.as_str(), v))
    }

    /// The counters of every namespace in `namespaces` that can be read (entering one needs
    /// CAP_SYS_ADMIN), by inode; the others are left out, said with -v.
    pub fn per_namespace(namespaces: &[TfoNamespace]) -> BTreeMap<u32, Netstat> {
        let mut out = BTreeMap::new();
        for ns in namespaces {
            let Some(inode) = ns.inode else { continue };
            // In another namespace's thread /proc/self/net would still be ours.
            let read = || {
                Self::read_files(&[
                    Path::new("/proc/thread-self/net/netstat"),
                    Path::new("/proc/thread-self/net/snmp"),
                ])
            };
            let n = if ns.current { read() } else { netns::with_netns(&ns.path, read).and_then(|r| r) };
            match n {
                Ok(n) => {
                    out.insert(inode as u32, n);
                }
                Err(e) => log::info!("counters of {}: {e:#}", ns.label()),
            }
        }
        out
    }
}

/// A namespace's listeners' SYN flood counters since the namespace was made (since boot
/// for the host's): what `doctor`, a one-off reading, can tell of a flood
/// (aggregation::kernel_counted::FLOOD_COUNTERS says where the kernel counts each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ListenCounters {
    pub syncookies_sent: u64,
    pub listen_overflows: u64,
    pub listen_drops: u64,
}

impl ListenCounters {
    pub fn of(n: &Netstat) -> ListenCounters {
        ListenCounters {
            syncookies_sent: n.get("TcpExtSyncookiesSent"),
            listen_overflows: n.get("TcpExtListenOverflows"),
            listen_drops: n.get("TcpExtListenDrops"),
        }
    }

    /// The calling thread's namespace's (in another namespace's thread, /proc/self/net
    /// would still be the process's).
    pub fn read_here() -> Result<ListenCounters, String> {
        Netstat::read_files(&[Path::new("/proc/thread-self/net/netstat")])
            .map(|n| ListenCounters::of(&n))
            .map_err(|e| format!("{e:#}"))
    }
}

/// The counters tfo-trace follows in every namespace while it traces (the kernel-counted
/// outcomes, `report`'s findings): the TFO family, SYN retransmissions, syncookies (a
/// listener that answers with one skips TFO and moves no TFO counter), and a full accept
/// queue's drops (tcp_conn_request() drops the SYN before TFO is tried: what a client sees
/// as its SYN-data dropped).
pub fn is_tfo_counter(key: &str) -> bool {
    key.starts_with("TcpExtTCPFastOpen")
        || matches!(
            key,
            "TcpExtTCPSynRetrans"
                | "TcpExtSyncookiesSent"
                | "TcpExtSyncookiesRecv"
                | "TcpExtListenOverflows"
                | "TcpExtListenDrops"
        )
}

/// One namespace's TFO counters, read from inside it, and what tells this namespace from
/// a later one that gets the same inode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetnsReading {
    pub counters: Netstat,
    /// The namespace's cookie (SO_NETNS_COOKIE, 5.14+): never reused, where an inode is.
    pub cookie: Option<u64>,
}

/// SO_NETNS_COOKIE (include/uapi/asm-generic/socket.h; x86_64 and arm64 alike).
const SO_NETNS_COOKIE: libc::c_int = 71;

impl NetnsReading {
    /// The calling thread's namespace (run inside `every_netns::run_in_each`).
    pub fn here() -> Result<NetnsReading> {
        let all = Netstat::read_files(&[Path::new("/proc/thread-self/net/netstat")])?;
        let counters = Netstat(all.0.into_iter().filter(|(k, _)| is_tfo_counter(k)).collect());
        Ok(NetnsReading { counters, cookie: netns_cookie_here() })
    }

    /// The namespace of process `pid`, from its /proc/PID/net/netstat, without entering it
    /// (anyone who may see the process may read it: no CAP_SYS_ADMIN, no setns). The file
    /// is checked to be that of the namespace whose netstat inode is `expect`, where given:
    /// a process may have moved, or its pid gone to another.
    pub fn through(pid: u32, expect: Option<u32>) -> Result<NetnsReading> {
        use std::{io::Read as _, os::unix::fs::MetadataExt as _};
        let path = format!("/proc/{pid}/net/netstat");
        let mut file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        let inode = file.metadata().with_context(|| format!("stat of {path}"))?.ino() as u32;
        if expect.is_some_and(|e| e != inode) {
            bail!("pid {pid} is in another namespace now");
        }
        let mut text = String::new();
        file.read_to_string(&mut text).with_context(|| format!("reading {path}"))?;
        let all = Netstat::parse(&text)?;
        let counters = Netstat(all.0.into_iter().filter(|(k, _)| is_tfo_counter(k)).collect());
        Ok(NetnsReading { counters, cookie: None })
    }
}

/// The calling thread's namespace cookie, from a socket made there (a Unix one: no
/// network stack involved); None before 5.14.
fn netns_cookie_here() -> Option<u64> {
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
    // SAFETY: socket() returns a new fd (owned below) or -1; getsockopt writes at most
    // `len` bytes into a live u64.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let sock = OwnedFd::from_raw_fd(fd);
        let mut cookie: u64 = 0;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        let rc = libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        );
        (rc == 0 && cookie != 0).then_some(cookie)
    }
}

/// `"TcpExt: a b c"` -> `("TcpExt", " a b c")`.
fn split_tag(line: &str) -> Option<(&str, &str)> {
    let (tag, rest) = line.split_once(':')?;
    let tag = tag.trim();
    (!tag.is_empty() && !tag.contains(char::is_whitespace)).then_some((tag, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on the project machine (Linux 6.18) from a lab client namespace after
    /// five TFO connections: `cat /proc/net/netstat /proc/net/snmp`.
    const SAMPLE: &str = r#"TcpExt: SyncookiesSent SyncookiesRecv SyncookiesFailed EmbryonicRsts PruneCalled RcvPruned OfoPruned OutOfWindowIcmps LockDroppedIcmps ArpFilter TW TWRecycled TWKilled PAWSActive PAWSEstab BeyondWindow TSEcrRejected PAWSOldAck PAWSTimewait DelayedACKs DelayedACKLocked DelayedACKLost ListenOverflows ListenDrops TCPHPHits TCPPureAcks TCPHPAcks TCPRenoRecovery TCPSackRecovery TCPSACKReneging TCPSACKReorder TCPRenoReorder TCPTSReorder TCPFullUndo TCPPartialUndo TCPDSACKUndo TCPLossUndo TCPLostRetransmit TCPRenoFailures TCPSackFailures TCPLossFailures TCPFastRetrans TCPSlowStartRetrans TCPTimeouts TCPLossProbes TCPLossProbeRecovery TCPRenoRecoveryFail TCPSackRecoveryFail TCPRcvCollapsed TCPBacklogCoalesce TCPDSACKOldSent TCPDSACKOfoSent TCPDSACKRecv TCPDSACKOfoRecv TCPAbortOnData TCPAbortOnClose TCPAbortOnMemory TCPAbortOnTimeout TCPAbortOnLinger TCPAbortFailed TCPMemoryPressures TCPMemoryPressuresChrono TCPSACKDiscard TCPDSACKIgnoredOld TCPDSACKIgnoredNoUndo TCPSpuriousRTOs TCPMD5NotFound TCPMD5Unexpected TCPMD5Failure TCPSackShifted TCPSackMerged TCPSackShiftFallback TCPBacklogDrop PFMemallocDrop TCPMinTTLDrop TCPDeferAcceptDrop IPReversePathFilter TCPTimeWaitOverflow TCPReqQFullDoCookies TCPReqQFullDrop TCPRetransFail TCPRcvCoalesce TCPOFOQueue TCPOFODrop TCPOFOMerge TCPChallengeACK TCPSYNChallenge TCPFastOpenActive TCPFastOpenActiveFail TCPFastOpenPassive TCPFastOpenPassiveFail TCPFastOpenListenOverflow TCPFastOpenCookieReqd TCPFastOpenBlackhole TCPSpuriousRtxHostQueues BusyPollRxPackets TCPAutoCorking TCPFromZeroWindowAdv TCPToZeroWindowAdv TCPWantZeroWindowAdv TCPSynRetrans TCPOrigDataSent TCPHystartTrainDetect TCPHystartTrainCwnd TCPHystartDelayDetect TCPHystartDelayCwnd TCPACKSkippedSynRecv TCPACKSkippedPAWS TCPACKSkippedSeq TCPACKSkippedFinWait2 TCPACKSkippedTimeWait TCPACKSkippedChallenge TCPWinProbe TCPKeepAlive TCPMTUPFail TCPMTUPSuccess TCPDelivered TCPDeliveredCE TCPAckCompressed TCPZeroWindowDrop TCPRcvQDrop TCPWqueueTooBig TCPFastOpenPassiveAltKey TcpTimeoutRehash TcpDuplicateDataRehash TCPDSACKRecvSegs TCPDSACKIgnoredDubious TCPMigrateReqSuccess TCPMigrateReqFailure TCPPLBRehash TCPAORequired TCPAOBad TCPAOKeyNotFound TCPAOGood TCPAODroppedIcmps
TcpExt: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 6 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 4 0 0 0 0 0 0 0 0 0 0 0 0 0 10 0 0 0 0 0 0 0 0 0 0 0 0 0 0 15 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
IpExt: InNoRoutes InTruncatedPkts InMcastPkts OutMcastPkts InBcastPkts OutBcastPkts InOctets OutOctets InMcastOctets OutMcastOctets InBcastOctets OutBcastOctets InCsumErrors InNoECTPkts InECT1Pkts InECT0Pkts InCEPkts ReasmOverlaps
IpExt: 0 0 0 0 0 0 1464 1400 0 0 0 0 0 21 0 0 0 0
MPTcpExt: MPCapableSYNRX MPCapableSYNTX MPCapableSYNACKRX MPCapableACKRX MPCapableFallbackACK MPCapableFallbackSYNACK MPCapableSYNTXDrop MPCapableSYNTXDisabled MPCapableEndpAttempt MPFallbackTokenInit MPTCPRetrans MPJoinNoTokenFound MPJoinSynRx MPJoinSynBackupRx MPJoinSynAckRx MPJoinSynAckBackupRx MPJoinSynAckHMacFailure MPJoinAckRx MPJoinAckHMacFailure MPJoinRejected MPJoinSynTx MPJoinSynTxCreatSkErr MPJoinSynTxBindErr MPJoinSynTxConnectErr DSSNotMatching DSSCorruptionFallback DSSCorruptionReset InfiniteMapTx InfiniteMapRx DSSNoMatchTCP DataCsumErr OFOQueueTail OFOQueue OFOMerge NoDSSInWindow DuplicateData AddAddr AddAddrTx AddAddrTxDrop EchoAdd EchoAddTx EchoAddTxDrop PortAdd AddAddrDrop MPJoinPortSynRx MPJoinPortSynAckRx MPJoinPortAckRx MismatchPortSynRx MismatchPortAckRx RmAddr RmAddrDrop RmAddrTx RmAddrTxDrop RmSubflow MPPrioTx MPPrioRx MPFailTx MPFailRx MPFastcloseTx MPFastcloseRx MPRstTx MPRstRx SubflowStale SubflowRecover SndWndShared RcvWndShared RcvWndConflictUpdate RcvWndConflict MPCurrEstab Blackhole MPCapableDataFallback MD5SigFallback DssFallback SimultConnectFallback FallbackFailed WinProbe
MPTcpExt: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits
Ip: 2 64 21 0 0 0 0 0 21 19 0 0 0 0 0 0 0 0 0 19
Icmp: InMsgs InErrors InCsumErrors InDestUnreachs InTimeExcds InParmProbs InSrcQuenchs InRedirects InEchos InEchoReps InTimestamps InTimestampReps InAddrMasks InAddrMaskReps OutMsgs OutErrors OutRateLimitGlobal OutRateLimitHost OutDestUnreachs OutTimeExcds OutParmProbs OutSrcQuenchs OutRedirects OutEchos OutEchoReps OutTimestamps OutTimestampReps OutAddrMasks OutAddrMaskReps
Icmp: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 5 0 0 0 0 21 19 0 0 0 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 0 0 0 0 0 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
"#;

    #[test]
    fn parses_real_sample() {
        let n = Netstat::parse(SAMPLE).expect("sample parses");
        assert_eq!(n.get("TcpExtTCPFastOpenActive"), 4);
        assert_eq!(n.get("TcpExtTCPFastOpenActiveFail"), 0);
        assert_eq!(n.get("TcpExtTCPSynRetrans"), 0);
        assert_eq!(n.get("TcpActiveOpens"), 5);
        assert_eq!(n.get("TcpRtoMin"), 200);
        assert_eq!(n.get("IcmpMsgOutType3"), 0); // absent key reads as 0
        assert!(!n.0.contains_key("TcpMaxConn")); // -1 is skipped
        assert!(n.0.contains_key("TcpExtTCPFastOpenPassiveAltKey"));
        assert!(n.0.contains_key("IpExtInOctets"));
    }

    #[test]
    fn delta_and_get() {
        let a = Netstat::parse("TcpExt: A B\nTcpExt: 1 5\nTcp: CurrEstab\nTcp: 3\n").unwrap();
        let b = Netstat::parse("TcpExt: A B C\nTcpExt: 4 5 2\nTcp: CurrEstab\nTcp: 1\n").unwrap();
        let d = Netstat::delta(&a, &b);
        assert_eq!(d.get("TcpExtA"), 3);
        assert_eq!(d.get("TcpExtB"), 0);
        assert_eq!(d.get("TcpExtC"), 2);
        assert_eq!(d.get("TcpCurrEstab"), 0);
        assert_eq!(d.get("Nope"), 0);
        assert_eq!(d.nonzero().collect::<Vec<_>>(), vec![("TcpExtA", 3), ("TcpExtC", 2)]);
    }

    #[test]
    fn rejects_malformed() {
        assert!(Netstat::parse("TcpExt: A B\n").is_err()); // no value line
        assert!(Netstat::parse("TcpExt: A B\nTcpExt: 1\n").is_err()); // count mismatch
        assert!(Netstat::parse("TcpExt: A\nIpExt: 1\n").is_err()); // tag mismatch
        assert!(Netstat::parse("TcpExt: A\nTcpExt: x\n").is_err()); // not a number
        assert!(Netstat::parse("garbage\n").is_err());
        assert_eq!(Netstat::parse("").unwrap(), Netstat::default());
    }
}
