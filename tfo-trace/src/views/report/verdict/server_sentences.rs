//! The sentences a listener's verdict ([`super::listener`]) and its namespace's counters
//! ([`super::namespace`]) both say: the same fault seen from the socket or from the
//! namespace's counters reads the same.
use crate::units;

/// `listener 0.0.0.0:81: 37 TFO queue overflows (max_qlen 16); raise fastopen= ...`.
pub(super) fn overflow_sentence(
    listener: &str,
    n: u64,
    max_qlen: Option<u32>,
    somaxconn: Option<u32>,
) -> String {
    let q = max_qlen.map(|q| format!("max_qlen {q}")).unwrap_or_else(|| "max_qlen unknown".into());
    let advice = match (max_qlen, somaxconn) {
        (Some(q), Some(s)) if q >= s => {
            format!("max_qlen is already at somaxconn ({s}): raise net.core.somaxconn first, then fastopen=")
        }
        _ => "raise fastopen= but keep it below somaxconn".into(),
    };
    format!("{listener}: {} ({q}); {advice}", units::plural(n, "TFO queue overflow", "TFO queue overflows"))
        .replacen(listener, &format!("listener {listener}"), 1)
}

/// What TcpExtTCPFastOpenPassiveFail counts (tcp_try_fastopen()): a cookie that matches none
/// of the listener's keys for this client's and server's addresses (the siphash of both,
/// __tcp_fastopen_cookie_gen_cipher), or a valid one whose child socket could not be made
/// (tcp_fastopen_create_child() failed). A key rotated is one of four.
pub(super) const PASSIVE_FAIL_CAUSES: &str = "a cookie none of its keys made for that client (its key \
     rotated, another server's cookie behind the same address, or the client's address changed behind \
     NAT), or a good cookie whose connection socket could not be made (memory)";

/// `listener X` or `netns N`: the key changed without a backup, refused then accepted.
pub(super) fn rotated_without_backup_sentence(subject: &str, refused: u64, accepted: u64) -> String {
    format!(
        "{subject}: the TFO key was likely rotated without a backup key (or clients' addresses changed \
         once behind NAT): {} with a cookie it no longer takes refused (each resent at once on the SYN-ACK, \
         a round trip a working TFO saves), then {accepted} accepted on new cookies: a one-off, not a \
         fault; next time keep the old key as backup (`sysctl -w net.ipv4.tcp_fastopen_key=NEW,OLD`)",
        units::plural(refused, "SYN-data", "SYN-data")
    )
}
