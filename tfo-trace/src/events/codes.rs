//! Numbers the kernel's record carries that users read by name: the error a connect ended
//! with ([`Errno`]), what tripped blackhole detection ([`Trip`]).
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tfo_trace_common::trip;

/// An errno a connect ended with (`connect_failed`), named as libc names it: the ones
/// tcp_reset(), tcp_write_err() and an ICMP error (tcp_v4_err's icmp_err_convert) give a
/// connect by name, any other as `errno N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Errno(pub u8);

/// The names a connect's end is given, by number (Linux's asm-generic/errno.h).
const NAMES: &[(u8, &str)] = &[
    (libc::ECONNREFUSED as u8, "ECONNREFUSED"),
    (libc::ETIMEDOUT as u8, "ETIMEDOUT"),
    (libc::EHOSTUNREACH as u8, "EHOSTUNREACH"),
    (libc::ENETUNREACH as u8, "ENETUNREACH"),
    (libc::ECONNRESET as u8, "ECONNRESET"),
    (libc::ECONNABORTED as u8, "ECONNABORTED"),
    (libc::EPROTO as u8, "EPROTO"),
    (libc::ENOPROTOOPT as u8, "ENOPROTOOPT"),
    (libc::EACCES as u8, "EACCES"),
    (libc::EPERM as u8, "EPERM"),
    (libc::EMSGSIZE as u8, "EMSGSIZE"),
    (libc::ENONET as u8, "ENONET"),
    (libc::EHOSTDOWN as u8, "EHOSTDOWN"),
];

impl Errno {
    /// The connect was refused by a reset (tcp_reset() in SYN_SENT).
    pub const RESET: Errno = Errno(libc::ECONNREFUSED as u8);
    /// Every SYN timed out (tcp_write_err() without an ICMP error held).
    pub const TIMED_OUT: Errno = Errno(libc::ETIMEDOUT as u8);

    /// The record's byte: 0 is none (not read).
    pub fn of(raw: u8) -> Option<Errno> {
        (raw != 0).then_some(Errno(raw))
    }

    pub fn name(self) -> Option<&'static str> {
        NAMES.iter().find(|(n, _)| *n == self.0).map(|(_, name)| *name)
    }

    fn parse(s: &str) -> Option<Errno> {
        if let Some((n, _)) = NAMES.iter().find(|(_, name)| *name == s) {
            return Some(Errno(*n));
        }
        s.strip_prefix("errno ")?.parse().ok().map(Errno)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl Serialize for Errno {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Errno {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Errno::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("not an errno: {s:?}")))
    }
}

/// What tripped blackhole detection (`active_disabled`'s `trip`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trip {
    /// A TFO socket's third timeout in a row, or one that gave up before it
    /// (tcp_fastopen_active_detect_blackhole()).
    Timeouts,
    /// The peer's FIN or RST out of order on a TFO client that got no data (its data lost
    /// on the path): tcp_fastopen_active_disable_ofo_check() and the like.
    OutOfOrderEnd,
}

impl Trip {
    /// The record's byte: None where not told.
    pub fn of(raw: u8) -> Option<Trip> {
        match raw {
            trip::TIMEOUTS => Some(Trip::Timeouts),
            trip::OUT_OF_ORDER_END => Some(Trip::OutOfOrderEnd),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_read_by_name_both_ways() {
        assert_eq!(Errno::RESET.to_string(), "ECONNREFUSED");
        assert_eq!(Errno(250).to_string(), "errno 250");
        for e in [Errno::RESET, Errno::TIMED_OUT, Errno(250)] {
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(serde_json::from_str::<Errno>(&json).unwrap(), e, "{json}");
        }
        assert!(serde_json::from_str::<Errno>("\"EWHAT\"").is_err());
        assert_eq!(Errno::of(0), None);
        assert_eq!(Trip::of(trip::UNKNOWN), None);
        assert_eq!(Trip::of(trip::OUT_OF_ORDER_END), Some(Trip::OutOfOrderEnd));
    }
}
