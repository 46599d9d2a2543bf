//! A TCP Fast Open lab on one machine: two network namespaces (client, server) joined by
//! a veth pair, per-namespace `net.ipv4.tcp_fastopen`, an optional nftables "middlebox"
//! that drops SYNs carrying data, and TFO peers run as child processes of the `tfo-trace`
//! binary (`lab-server`, `lab-client`) so the tracer sees real pids. `load` (the bench's
//! connection generator) and `soak` come only with the `fixtures` feature.
//!
//! Addresses (N = per-lab number, differs between labs of one process):
//! client 198.18.N.1/24 and fd00:7f0:N::1/64; server 198.18.N.2 and fd00:7f0:N::2, plus
//! 198.18.N.3 and fd00:7f0:N::3 when `server_addrs == 2`. Traffic never leaves the two
//! namespaces: they have no other interface and no default route.
//!
//! Cleanup: `Drop for Lab` kills the processes it started (by pid), deletes the nft table
//! and both namespaces, also after a failure half-way through [`Lab::create`]. Every lab
//! is also in a process-wide registry (`registry`), and `registry::sweep_stale` removes
//! namespaces left by runs that died (their embedded pid is gone).
mod capture;
mod cmd;
pub mod dns;
#[cfg(feature = "fixtures")]
pub mod load;
mod middlebox;
mod namespaces;
mod peers;
mod registry;
#[cfg(feature = "fixtures")]
pub mod soak;
mod sock;
pub mod traffic;

pub use capture::{SynCapture, WireSyn};
pub use cmd::join_cgroup_at_spawn;
pub use middlebox::{is_no_netem, HeldBy};
pub use namespaces::{Lab, LabConfig, Side, NS_PREFIX};
pub(crate) use peers::ClientChild;
pub use peers::{ClientRun, ServerHandle};
pub use traffic::{ClientArgs, ClientMode, ServerArgs};

#[cfg(test)]
mod tests {
    use super::capture::parse_tcpdump_syn;
    use super::*;

    #[test]
    fn parses_tcpdump_syn_lines() {
        let v4 = "1764491234.123456 IP 198.18.0.1.40000 > 198.18.0.2.8080: Flags [S], seq 1, win 64240, options [mss 1460,tfo cookie 0011223344556677], length 100";
        assert_eq!(
            parse_tcpdump_syn(v4),
            Some(WireSyn {
                time_s: 1764491234.123456,
                sport: 40000,
                dport: 8080,
                seq: 1,
                ack: None,
                syn_ack: false,
                payload: 100,
                exp_tfo: false,
                tfo: true,
                cookie: Some("0011223344556677".into()),
            })
        );
        let v6 = "1764491235.000001 IP6 fd00:7f0::1.41000 > fd00:7f0::2.8080: Flags [S], seq 2, win 64800, length 0";
        assert_eq!(
            parse_tcpdump_syn(v6),
            Some(WireSyn {
                time_s: 1764491235.000001,
                sport: 41000,
                dport: 8080,
                seq: 2,
                ack: None,
                syn_ack: false,
                payload: 0,
                exp_tfo: false,
                tfo: false,
                cookie: None,
            })
        );
        assert_eq!(parse_tcpdump_syn("tcpdump: verbose output suppressed"), None);
        let http =
            "1764491236.5 IP 198.18.0.1.40002 > 198.18.0.2.8080: Flags [S], seq 3:103, length 100: HTTP";
        assert_eq!(parse_tcpdump_syn(http).map(|s| (s.payload, s.seq)), Some((100, 3)));
        let exp = "1.5 IP 198.19.7.1.46764 > 198.19.7.2.7001: Flags [S], seq 4000000000, options [mss 1460,exp-tfo cookiereq], length 0";
        assert_eq!(parse_tcpdump_syn(exp).map(|s| (s.exp_tfo, s.tfo, s.cookie)), Some((true, true, None)));
        let synack = "2.5 IP 198.19.7.2.7001 > 198.19.7.1.46764: Flags [S.], seq 9, ack 10, length 0";
        assert_eq!(
            parse_tcpdump_syn(synack).map(|s| (s.syn_ack, s.sport, s.dport, s.seq, s.ack)),
            Some((true, 7001, 46764, 9, Some(10)))
        );
        // A SYN without its sequence number is no SYN this parser understood.
        assert_eq!(parse_tcpdump_syn("1.5 IP 198.19.7.1.46764 > 198.19.7.2.7001: Flags [S], length 0"), None);
        let cookie = "3.5 IP 198.19.7.2.7001 > 198.19.7.1.46764: Flags [S.], seq 9, ack 10, win 65160, options [mss 1460,sackOK,TS val 1 ecr 2,nop,wscale 7,tfo  cookie 8b7e3a1f00c2d4e5,nop,nop], length 0";
        assert_eq!(parse_tcpdump_syn(cookie).and_then(|s| s.cookie).as_deref(), Some("8b7e3a1f00c2d4e5"));
    }

    #[test]
    fn cli_args_round_trip_through_clap() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        enum Cli {
            LabServer(ServerArgs),
            LabClient(ClientArgs),
        }
        let s = ServerArgs { tfo_queue: 16, ..ServerArgs::new("[::]:80".parse().unwrap()) };
        let parsed =
            Cli::try_parse_from(["x", "lab-server"].into_iter().map(String::from).chain(s.to_cli_args()))
                .unwrap();
        assert!(matches!(parsed, Cli::LabServer(ref p) if *p == s));
        let c = ClientArgs {
            mode: ClientMode::FastopenConnect,
            count: 5,
            ..ClientArgs::new("198.18.0.2:80".parse().unwrap())
        };
        let parsed =
            Cli::try_parse_from(["x", "lab-client"].into_iter().map(String::from).chain(c.to_cli_args()))
                .unwrap();
        assert!(matches!(parsed, Cli::LabClient(ref p) if *p == c));
    }
}
