//! The tests' own oracles, tested: what every other test compares the tracer with must be
//! right by itself, and share nothing with the product. The counters read by `nstat`
//! (`common::nstat`), which fail on a counter nstat does not list; the BTF reader
//! (`common::btf`), against bpftool's own dump of the same file.
use crate::common;

use std::{panic, process::Command};

use common::{
    btf::{Btf, VMLINUX},
    Deltas, Nstat,
};
use tfo_trace::lab::{traffic::ClientArgs, Lab, LabConfig, ServerArgs, Side};

/// What a failed check said, where it failed.
fn failure(check: impl FnOnce()) -> Option<String> {
    let failed = panic::catch_unwind(panic::AssertUnwindSafe(check)).err()?;
    Some(failed.downcast_ref::<String>().cloned().unwrap_or_default())
}

/// nstat's text, read by the test's own parser; a counter nstat does not list fails the
/// test (a misspelt name would otherwise read 0 and agree with a silent tracer).
fn nstat_fails_on_a_counter_it_does_not_list() {
    let text = "#kernel\nTcpExtTCPFastOpenActive         4                  0.0\nTcpExtTCPSynRetrans 2 0.0\n";
    let n = Nstat::of_text("lab", text);
    assert_eq!((n.get("TcpExtTCPFastOpenActive"), n.get("TcpExtTCPSynRetrans")), (4, 2));
    let before = Nstat::of_text("lab", "#kernel\nTcpExtTCPFastOpenActive 1 0.0\nTcpExtTCPSynRetrans 2 0.0\n");
    assert_eq!(format!("{:?}", n.since(&before)), r#"{"TcpExtTCPFastOpenActive": 3}"#);
    let said = failure(|| {
        n.get("TcpExtTCPFastopenActive");
    })
    .expect("an unlisted counter must fail");
    assert!(said.contains("lists no counter \"TcpExtTCPFastopenActive\""), "{said}");
    assert!(said.contains("TcpExtTCPFastOpenActive"), "names the counter it most likely meant: {said}");
    // A text of another shape is no set of zeros.
    assert!(Nstat::parse("TcpExtTCPFastOpenActive four 0.0\n").is_err());
    assert!(Nstat::parse("#kernel\n").is_err());
}

/// On this kernel: `nstat` in a lab's namespaces counts two connections to a TFO listener
/// on each end, and nothing before them: both opens on each side, the first's cookie
/// request (TcpExtTCPFastOpenCookieReqd, tcp_try_fastopen(), net/ipv4/tcp_fastopen.c:363
/// in 6.12), the second's SYN-data taken (TcpExtTCPFastOpenPassive, :406; the client's
/// TcpExtTCPFastOpenActive, tcp_rcv_fastopen_synack()). A counter it does not list fails
/// there too.
fn nstat_counts_a_lab_s_connections() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let listen = std::net::SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
    let server_args = ServerArgs { tfo_queue: 16, ..ServerArgs::new(listen) };
    let _server = lab.start_server_with(common::exe(), &server_args).unwrap();
    let d = Deltas::since(&lab);
    let (dc, ds) = d.both();
    assert_eq!((dc.nonzero().count(), ds.nonzero().count()), (0, 0), "nothing ran yet: {dc:?} {ds:?}");
    let two = ClientArgs { count: 2, payload_bytes: 100, ..ClientArgs::new(listen) };
    assert_eq!(lab.run_client(common::exe(), &two).unwrap().ok_count(), 2);
    let ds = d.wait_for(Side::Server, "TcpExtTCPFastOpenPassive", 1);
    let dc = d.client();
    eprintln!("client {dc:?}\nserver {ds:?}");
    assert_eq!((dc.get("TcpActiveOpens"), ds.get("TcpPassiveOpens")), (2, 2), "{dc:?} {ds:?}");
    let tfo = (
        ds.get("TcpExtTCPFastOpenCookieReqd"),
        dc.get("TcpExtTCPFastOpenActive"),
        ds.get("TcpExtTCPFastOpenPassive"),
    );
    assert_eq!(tfo, (1, 1, 1), "{dc:?} {ds:?}");
    assert!(failure(|| {
        dc.get("TcpExtNoSuchCounter");
    })
    .is_some());
}

/// bpftool's own listing of struct `name`'s direct members, from its raw dump of a BTF
/// file (`[ID] STRUCT 'name' size=.. vlen=..`, then a tab-indented line per member).
fn bpftool_members(raw: &str, name: &str) -> Vec<String> {
    let head = format!(" STRUCT '{name}' ");
    let mut lines = raw.lines().skip_while(|l| !(l.starts_with('[') && l.contains(&head)));
    assert!(lines.next().is_some(), "bpftool lists no struct {name}");
    lines
        .take_while(|l| l.starts_with('\t'))
        .filter_map(|l| Some(l.trim().strip_prefix('\'')?.split('\'').next()?.to_string()))
        .collect()
}

/// The tests' BTF reader (`common::btf`) against bpftool's dump of the same kernel BTF:
/// every member bpftool lists in `tcp_sock` it finds, `syn_fastopen_child` (what
/// `server_speaks_first` decides from) present or absent alike; a member of an anonymous
/// union inside a struct (`sock_common`'s `skc_daddr`) is found too, and neither a member
/// nor a struct that is not there.
fn btf_reader_agrees_with_bpftool() {
    let btf = match Btf::read(VMLINUX) {
        Ok(btf) => btf,
        Err(e) if !std::path::Path::new(VMLINUX).exists() => common::skip(format!("no kernel BTF here: {e}")),
        Err(e) => panic!("{e}"),
    };
    assert!(btf.struct_has_member("sock_common", "skc_daddr").unwrap(), "a member of an anonymous union");
    assert!(!btf.struct_has_member("tcp_sock", "no_such_member").unwrap());
    assert!(btf.struct_has_member("no_such_struct_here", "x").is_err());
    common::bpftool::require("to check the tests' BTF reader against");
    let out =
        Command::new("bpftool").args(["btf", "dump", "file", VMLINUX, "format", "raw"]).output().unwrap();
    assert!(out.status.success(), "bpftool: {}", String::from_utf8_lossy(&out.stderr));
    let raw = String::from_utf8_lossy(&out.stdout);
    let members = bpftool_members(&raw, "tcp_sock");
    assert!(members.len() > 50, "{members:?}");
    for member in members.iter().filter(|m| *m != "(anon)") {
        assert!(btf.struct_has_member("tcp_sock", member).unwrap(), "bpftool lists tcp_sock.{member}");
    }
    let child = btf.struct_has_member("tcp_sock", "syn_fastopen_child").unwrap();
    assert_eq!(child, members.iter().any(|m| m == "syn_fastopen_child"), "syn_fastopen_child: {members:?}");
    eprintln!(
        "tcp_sock: {} members; syn_fastopen_child {}",
        members.len(),
        if child { "present" } else { "absent" }
    );
}

module_tests!(
    nstat_fails_on_a_counter_it_does_not_list,
    nstat_counts_a_lab_s_connections,
    btf_reader_agrees_with_bpftool,
);
