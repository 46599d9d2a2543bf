//! `tfo-trace stalls` against the real kernel: a middlebox drops SYN-data, and every
//! connection that paid the 1 s SYN timeout must be listed, matching the kernel's
//! TcpExtTCPSynRetrans and the middlebox's drop counter.
mod common;

use std::{net::SocketAddr, time::Duration};

use common::{netns_inode, Tracer};
use tfo_trace::{
    kernel::netstat::Netstat,
    lab::{traffic::ClientArgs, Lab, LabConfig, Side},
};

fn stalls_lists_every_connection_that_paid_a_syn_timeout() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, 8443, 16, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8443);
    let clean = lab.run_client(common::exe(), &ClientArgs { count: 3, ..ClientArgs::new(dst) }).unwrap();
    assert_eq!(clean.ok_count(), 3);
    lab.middlebox_drop_syn_data(None).unwrap();
    let cli_ns = netns_inode(&lab, Side::Client);
    let before = lab.netstat(Side::Client).unwrap();
    let dropped_before = lab.middlebox_dropped().unwrap();

    let tracer = Tracer::start_command(&["stalls", "--json"]);
    // One clean run first (cookie cached, nothing lost), then stalled ones.
    lab.middlebox_clear().unwrap();
    let fine = lab.run_client(common::exe(), &ClientArgs { count: 2, ..ClientArgs::new(dst) }).unwrap();
    lab.middlebox_drop_syn_data(None).unwrap();
    let n = 2;
    let run = lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(dst) }).unwrap();
    let (lines, stderr) = tracer.stop();
    let delta = Netstat::delta(&before, &lab.netstat(Side::Client).unwrap());
    let dropped = lab.middlebox_dropped().unwrap() - dropped_before;
    assert_eq!(fine.ok_count() + run.ok_count(), (2 + n) as usize);

    let mine: Vec<_> = lines.iter().filter(|l| l["netns"] == cli_ns).collect();
    assert_eq!(delta.get("TcpExtTCPSynRetrans"), u64::from(n), "kernel: {delta:?}");
    assert_eq!(dropped, u64::from(n), "packets the middlebox dropped");
    assert_eq!(
        mine.len() as u64,
        delta.get("TcpExtTCPSynRetrans"),
        "one line per stalled connection: {mine:?}"
    );
    for l in &mine {
        assert_eq!(l["cause"], "syn_data_dropped", "{l}");
        assert_eq!(l["pid"], run.pid, "the stalled process: {l}");
        assert_eq!(l["daddr"], dst.to_string());
        assert_eq!(l["retransmits"], 1);
        let lost = Duration::from_micros(l["lost_us"].as_u64().unwrap());
        assert!(lost >= Duration::from_millis(900) && lost <= Duration::from_millis(1500), "{l}");
    }
    assert!(stderr.iter().any(|l| l.contains("stalled connections")), "{stderr:?}");
}

tests_main!(
    stalls_lists_every_connection_that_paid_a_syn_timeout,
);
