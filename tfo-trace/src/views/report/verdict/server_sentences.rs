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

/// `listener X` or `netns N`: the key changed without a backup, refused then accepted.
pub(super) fn rotated_without_backup_sentence(subject: &str, refused: u64, accepted: u64) -> String {
    format!(
        "{subject}: the TFO key was rotated without a backup key: {} with a cookie of the old key refused \
         (each resent after the handshake, one round trip), then {accepted} accepted on new cookies: a \
         one-off, not a fault; next time keep the old key as backup (`sysctl -w \
         net.ipv4.tcp_fastopen_key=NEW,OLD`)",
        units::plural(refused, "SYN-data", "SYN-data")
    )
}
