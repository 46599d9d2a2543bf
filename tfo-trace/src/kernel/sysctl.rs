//! The TCP Fast Open sysctls of one network namespace, and of every namespace this host
//! names ([`tfo_namespaces`]).
//!
//! `net.ipv4.tcp_fastopen`, `net.ipv4.tcp_fastopen_blackhole_timeout_sec` and
//! `net.ipv4.tcp_fastopen_key` are all per network namespace: a read of /proc/sys/net sees the
//! namespace of the *reading thread* (see [`crate::kernel::netns::with_netns`] to read another one).
//!
//! The key itself is a secret: this module never returns or prints it, only whether a primary
//! and a backup key are set.

use std::{fmt, io, path::Path};

use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::kernel::{netns, netstat::ListenCounters, ser_result};

/// Directory of the IPv4 sysctls, as seen by the reading thread's network namespace.
pub(crate) const PROC_SYS_IPV4: &str = "/proc/sys/net/ipv4";
pub(crate) const TCP_FASTOPEN_PATH: &str = "/proc/sys/net/ipv4/tcp_fastopen";
pub(crate) const TCP_FASTOPEN_BLACKHOLE_TIMEOUT_PATH: &str =
    "/proc/sys/net/ipv4/tcp_fastopen_blackhole_timeout_sec";
pub(crate) const TCP_FASTOPEN_KEY_PATH: &str = "/proc/sys/net/ipv4/tcp_fastopen_key";

/// `TFO_CLIENT_ENABLE` (include/net/tcp.h).
pub(crate) const TFO_CLIENT_ENABLE: u32 = 0x1;
/// `TFO_SERVER_ENABLE`.
pub(crate) const TFO_SERVER_ENABLE: u32 = 0x2;
/// `TFO_CLIENT_NO_COOKIE`.
pub(crate) const TFO_CLIENT_NO_COOKIE: u32 = 0x4;
/// `TFO_SERVER_COOKIE_NOT_REQD`.
pub(crate) const TFO_SERVER_COOKIE_NOT_REQD: u32 = 0x200;
/// `TFO_SERVER_WO_SOCKOPT1`.
pub(crate) const TFO_SERVER_WO_SOCKOPT1: u32 = 0x400;

/// One documented bit of `net.ipv4.tcp_fastopen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TfoBit {
    pub mask: u32,
    /// The kernel's name of the bit (include/net/tcp.h).
    pub name: &'static str,
    /// "client" or "server".
    pub side: &'static str,
    /// What the bit does when set.
    pub meaning: &'static str,
}

/// The bits the kernel knows (Documentation/networking/ip-sysctl.rst), in mask order.
pub(crate) const KNOWN_BITS: [TfoBit; 5] = [
    TfoBit {
        mask: TFO_CLIENT_ENABLE,
        name: "TFO_CLIENT_ENABLE",
        side: "client",
        meaning: "send data in the opening SYN (MSG_FASTOPEN, TCP_FASTOPEN_CONNECT)",
    },
    TfoBit {
        mask: TFO_SERVER_ENABLE,
        name: "TFO_SERVER_ENABLE",
        side: "server",
        meaning: "accept data in a SYN on listeners that set TCP_FASTOPEN",
    },
    TfoBit {
        mask: TFO_CLIENT_NO_COOKIE,
        name: "TFO_CLIENT_NO_COOKIE",
        side: "client",
        meaning: "send SYN-data without a cookie, whether or not one is cached",
    },
    TfoBit {
        mask: TFO_SERVER_COOKIE_NOT_REQD,
        name: "TFO_SERVER_COOKIE_NOT_REQD",
        side: "server",
        meaning: "accept SYN-data that carries no cookie option",
    },
    TfoBit {
        mask: TFO_SERVER_WO_SOCKOPT1,
        name: "TFO_SERVER_WO_SOCKOPT1",
        side: "server",
        meaning: "every listener accepts TFO, without the TCP_FASTOPEN socket option",
    },
];

/// Union of [`KNOWN_BITS`].
pub(crate) const KNOWN_MASK: u32 = TFO_CLIENT_ENABLE
    | TFO_SERVER_ENABLE
    | TFO_CLIENT_NO_COOKIE
    | TFO_SERVER_COOKIE_NOT_REQD
    | TFO_SERVER_WO_SOCKOPT1;

/// One bit of a [`TcpFastopen`] value, known or not.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BitState {
    pub mask: u32,
    /// Kernel name, or "unknown" for a bit this tool does not know.
    pub name: &'static str,
    pub side: &'static str,
    pub set: bool,
    pub meaning: &'static str,
}

/// The value of `net.ipv4.tcp_fastopen`, decoded bit by bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpFastopen(pub u32);

impl TcpFastopen {
    /// Parses the sysctl file's text: decimal as the kernel prints it; `0x...` hex also accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let parsed = if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            u32::from_str_radix(hex, 16)
        } else {
            t.parse::<u32>()
        };
        parsed.map(TcpFastopen).map_err(|e| format!("net.ipv4.tcp_fastopen: cannot parse {t:?}: {e}"))
    }

    pub fn value(self) -> u32 {
        self.0
    }
    pub fn client_enabled(self) -> bool {
        self.0 & TFO_CLIENT_ENABLE != 0
    }
    pub fn server_enabled(self) -> bool {
        self.0 & TFO_SERVER_ENABLE != 0
    }
    pub fn client_no_cookie(self) -> bool {
        self.0 & TFO_CLIENT_NO_COOKIE != 0
    }
    pub fn server_cookie_not_required(self) -> bool {
        self.0 & TFO_SERVER_COOKIE_NOT_REQD != 0
    }
    pub fn server_all_listeners(self) -> bool {
        self.0 & TFO_SERVER_WO_SOCKOPT1 != 0
    }
    /// Set bits this tool does not know (e.g. the removed 0x800 `TFO_SERVER_WO_SOCKOPT2`).
    pub fn unknown_bits(self) -> u32 {
        self.0 & !KNOWN_MASK
    }

    /// Every known bit (set or not), then every set unknown bit, in mask order.
    pub fn bits(self) -> Vec<BitState> {
        let mut out: Vec<BitState> = KNOWN_BITS
            .iter()
            .map(|b| BitState {
                mask: b.mask,
                name: b.name,
                side: b.side,
                set: self.0 & b.mask != 0,
                meaning: b.meaning,
            })
            .collect();
        let unknown = self.unknown_bits();
        for i in 0..32 {
            let mask = 1u32 << i;
            if unknown & mask != 0 {
                out.push(BitState {
                    mask,
                    name: "unknown",
                    side: "?",
                    set: true,
                    meaning: "bit not known to tfo-trace (ignored or removed in this kernel?)",
                });
            }
        }
        out.sort_by_key(|b| b.mask);
        out
    }

    /// One line per bit, e.g. `0x001 client set   TFO_CLIENT_ENABLE: send data in ...`.
    pub fn describe(self) -> Vec<String> {
        self.bits()
            .iter()
            .map(|b| {
                format!(
                    "{:#05x} {:<6} {:<5} {}: {}",
                    b.mask,
                    b.side,
                    if b.set { "set" } else { "unset" },
                    b.name,
                    b.meaning
                )
            })
            .collect()
    }

    /// Bits that are set but have no effect because the base bit of their side is off.
    pub fn ineffective_bits(self) -> Vec<String> {
        let mut out = Vec::new();
        if self.client_no_cookie() && !self.client_enabled() {
            out.push(format!(
                "{TFO_CLIENT_NO_COOKIE:#x} (client without cookie) has no effect while client bit {TFO_CLIENT_ENABLE:#x} is off"
            ));
        }
        for (mask, what) in
            [(TFO_SERVER_COOKIE_NOT_REQD, "server without cookie"), (TFO_SERVER_WO_SOCKOPT1, "all listeners")]
        {
            if self.0 & mask != 0 && !self.server_enabled() {
                out.push(format!(
                    "{mask:#x} ({what}) has no effect while server bit {TFO_SERVER_ENABLE:#x} is off"
                ));
            }
        }
        out
    }
}

impl fmt::Display for TcpFastopen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#x})", self.0, self.0)
    }
}

impl Serialize for TcpFastopen {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("TcpFastopen", 4)?;
        st.serialize_field("value", &self.0)?;
        st.serialize_field("hex", &format!("{:#x}", self.0))?;
        st.serialize_field("bits", &self.bits())?;
        st.serialize_field("unknown_bits", &self.unknown_bits())?;
        st.end()
    }
}

/// Which TFO server keys a namespace has. Never holds the key material.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FastopenKeyStatus {
    /// A primary key exists. The kernel generates one at random the first time a listener in
    /// the namespace enables TFO; before that (or with no context) the file reads all zeros.
    pub primary: bool,
    /// A backup key exists (the file shows `primary,backup`); cookies made with it are still accepted.
    pub backup: bool,
}

impl FastopenKeyStatus {
    /// Decodes the text of /proc/sys/net/ipv4/tcp_fastopen_key (`k1` or `k1,k2`, each key as
    /// four dash-separated 32-bit hex words). Only the presence of each key survives.
    pub fn parse(text: &str) -> Self {
        fn is_set(key: &str) -> bool {
            let k = key.trim();
            !k.is_empty() && k.chars().any(|c| c.is_ascii_hexdigit() && c != '0')
        }
        let mut parts = text.trim().splitn(2, ',');
        let primary = parts.next().map(is_set).unwrap_or(false);
        let backup = parts.next().map(is_set).unwrap_or(false);
        FastopenKeyStatus { primary, backup }
    }
}

/// Reads one sysctl file and returns its contents, trimmed. The read happens in the calling
/// thread's network namespace for /proc/sys/net files.
pub(crate) fn read_sysctl(path: impl AsRef<Path>) -> io::Result<String> {
    let path = path.as_ref();
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// `net.ipv4.tcp_fastopen` of the calling thread's namespace.
pub(crate) fn read_tcp_fastopen() -> io::Result<TcpFastopen> {
    let text = read_sysctl(TCP_FASTOPEN_PATH)?;
    TcpFastopen::parse(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// `net.ipv4.tcp_fastopen_blackhole_timeout_sec` of the calling thread's namespace
/// (0: active-side blackhole detection is off, the default since Linux 5.14).
pub(crate) fn read_blackhole_timeout_sec() -> io::Result<u32> {
    let text = read_sysctl(TCP_FASTOPEN_BLACKHOLE_TIMEOUT_PATH)?;
    text.parse::<u32>().map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("tcp_fastopen_blackhole_timeout_sec: cannot parse {text:?}: {e}"),
        )
    })
}

/// Whether a primary and a backup TFO key are set in the calling thread's namespace.
/// The file is mode 0600: non-root readers get PermissionDenied.
pub(crate) fn read_fastopen_key_status() -> io::Result<FastopenKeyStatus> {
    // Read, decode, drop: the key text never leaves this function.
    let text = read_sysctl(TCP_FASTOPEN_KEY_PATH)?;
    Ok(FastopenKeyStatus::parse(&text))
}

/// A network namespace and its TFO sysctls.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TfoNamespace {
    /// `ip netns` name(s), if any.
    pub name: Option<String>,
    pub path: String,
    pub inode: Option<u64>,
    /// The namespace this process runs in.
    pub current: bool,
    /// The same as pid 1's (the host's, outside containers); None when pid 1's is not readable.
    pub init: Option<bool>,
    #[serde(serialize_with = "ser_result")]
    pub tcp_fastopen: Result<TcpFastopen, String>,
    #[serde(serialize_with = "ser_result")]
    pub blackhole_timeout_sec: Result<u32, String>,
    #[serde(serialize_with = "ser_result")]
    pub key: Result<FastopenKeyStatus, String>,
    /// `net.ipv4.tcp_syncookies`: 2 answers every SYN with a syncookie, and a listener that
    /// does skips TFO (tcp_conn_request: no tcp_try_fastopen() for a syncookie).
    #[serde(serialize_with = "ser_result")]
    pub syncookies: Result<u32, String>,
    /// Its listeners' SYN flood counters since the namespace was made: SyncookiesSent moves
    /// under a flood with tcp_syncookies=1, and each such SYN skipped TFO.
    #[serde(serialize_with = "ser_result")]
    pub listen_counters: Result<ListenCounters, String>,
}

impl TfoNamespace {
    /// "current", "NAME", or "current (NAME)"; used in advice.
    pub fn label(&self) -> String {
        match (&self.name, self.current) {
            (Some(n), true) => format!("current ({n})"),
            (Some(n), false) => n.clone(),
            (None, true) => "current".into(),
            (None, false) => self.path.clone(),
        }
    }

    /// The name `ip -n NAME` takes for it: Ok(None) for the current namespace, Err for one
    /// without a name (it cannot be entered by name).
    pub fn ip_netns_name(&self) -> Result<Option<&str>, String> {
        if self.current {
            return Ok(None);
        }
        match self.name.as_deref() {
            Some(n) => Ok(Some(n.split(',').next().unwrap_or(n))),
            None => Err("not a named namespace".into()),
        }
    }
}

type Sysctls = (
    Result<TcpFastopen, String>,
    Result<u32, String>,
    Result<FastopenKeyStatus, String>,
    Result<u32, String>,
    Result<ListenCounters, String>,
);

/// The TFO sysctls of the calling thread's namespace, tcp_syncookies, and its listeners'
/// SYN flood counters.
fn read_tfo_sysctls() -> Sysctls {
    let syncookies = read_sysctl(format!("{PROC_SYS_IPV4}/tcp_syncookies"))
        .map_err(|e| e.to_string())
        .and_then(|t| t.parse::<u32>().map_err(|e| format!("tcp_syncookies: cannot parse {t:?}: {e}")));
    (
        read_tcp_fastopen().map_err(|e| e.to_string()),
        read_blackhole_timeout_sec().map_err(|e| e.to_string()),
        read_fastopen_key_status().map_err(|e| e.to_string()),
        syncookies,
        ListenCounters::read_here(),
    )
}

/// The current namespace first, then every named (`ip netns`) one, each with its TFO
/// sysctls; a namespace with two names appears once. Reading another namespace needs
/// CAP_SYS_ADMIN (setns), the key needs root: what cannot be read says why.
pub(crate) fn tfo_namespaces() -> Vec<TfoNamespace> {
    let current_ino = netns::current_netns_inode().ok();
    let init_ino = netns::netns_inode_of(netns::INIT_NETNS).ok();
    let named = netns::named_netns();
    let names = netns::names_by_inode(&named);
    let mut out = Vec::new();

    let (tcp_fastopen, blackhole_timeout_sec, key, syncookies, listen_counters) = read_tfo_sysctls();
    out.push(TfoNamespace {
        name: current_ino.and_then(|i| names.get(&i).cloned()),
        path: netns::SELF_NETNS.into(),
        inode: current_ino,
        current: true,
        init: init_ino.map(|i| current_ino == Some(i)),
        tcp_fastopen,
        blackhole_timeout_sec,
        key,
        syncookies,
        listen_counters,
    });

    for n in named {
        let path = n.path.display().to_string();
        if n.inode.is_some() && n.inode == current_ino {
            continue; // already shown as the current namespace, under its name
        }
        let read = match n.inode {
            None => {
                Err(format!("stale entry {path}: no namespace is mounted on it (`ip netns del {}`)", n.name))
            }
            Some(_) => netns::with_netns(&n.path, read_tfo_sysctls).map_err(|e| format!("{e:#}")),
        };
        let (tcp_fastopen, blackhole_timeout_sec, key, syncookies, listen_counters) = match read {
            Ok(t) => t,
            Err(e) => (Err(e.clone()), Err(e.clone()), Err(e.clone()), Err(e.clone()), Err(e)),
        };
        out.push(TfoNamespace {
            name: n.inode.and_then(|i| names.get(&i).cloned()).or(Some(n.name.clone())),
            path,
            inode: n.inode,
            current: false,
            init: init_ino.map(|i| n.inode == Some(i)),
            tcp_fastopen,
            blackhole_timeout_sec,
            key,
            syncookies,
            listen_counters,
        });
    }
    // Two names of one namespace appear once.
    let mut seen = std::collections::HashSet::new();
    out.retain(|n| n.inode.is_none() || seen.insert(n.inode));
    out
}

/// `tcp_fastopen_blackhole_timeout_sec` of each namespace of `inodes` that can be read
/// now: the current one, and named (`ip netns`) ones (entering needs CAP_SYS_ADMIN).
/// Only these, not every namespace: a live view asks for those with a pause.
pub(crate) fn blackhole_timeouts(inodes: &[u32]) -> std::collections::BTreeMap<u32, u32> {
    let mut out = std::collections::BTreeMap::new();
    let wanted = |i: u64| inodes.contains(&(i as u32));
    if let Some(i) = netns::current_netns_inode().ok().filter(|&i| wanted(i)) {
        if let Ok(t) = read_blackhole_timeout_sec() {
            out.insert(i as u32, t);
        }
    }
    for n in netns::named_netns() {
        let Some(i) = n.inode.filter(|&i| wanted(i) && !out.contains_key(&(i as u32))) else { continue };
        if let Ok(Ok(t)) = netns::with_netns(&n.path, read_blackhole_timeout_sec) {
            out.insert(i as u32, t);
        }
    }
    out
}

/// sysctl configuration files that set net.ipv4.tcp_fastopen_key (what systemd-sysctl and
/// `sysctl --system` read at boot).
pub(crate) fn persisted_key_files() -> Vec<String> {
    let mut files = vec![std::path::PathBuf::from("/etc/sysctl.conf")];
    for dir in
        ["/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d"]
    {
        if let Ok(rd) = std::fs::read_dir(dir) {
            files.extend(
                rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "conf")),
            );
        }
    }
    files
        .into_iter()
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| sets_fastopen_key(&t)))
        .map(|p| p.display().to_string())
        .collect()
}

/// Whether a sysctl.conf text sets net.ipv4.tcp_fastopen_key (either spelling, `-` prefix).
fn sets_fastopen_key(conf: &str) -> bool {
    conf.lines().map(str::trim).any(|l| {
        !l.starts_with('#')
            && !l.starts_with(';')
            && l.split('=').next().is_some_and(|k| {
                let k = k.trim().trim_start_matches('-').replace('/', ".");
                k == "net.ipv4.tcp_fastopen_key"
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_decimal_and_hex() {
        assert_eq!(TcpFastopen::parse("1\n").unwrap(), TcpFastopen(1));
        assert_eq!(TcpFastopen::parse(" 1539 ").unwrap(), TcpFastopen(0x603));
        assert_eq!(TcpFastopen::parse("0x603").unwrap(), TcpFastopen(0x603));
        assert!(TcpFastopen::parse("").is_err());
        assert!(TcpFastopen::parse("-1").is_err());
        assert!(TcpFastopen::parse("abc").is_err());
    }

    #[test]
    fn default_is_client_only() {
        // The kernel's default: the client side only.
        let v = TcpFastopen(TFO_CLIENT_ENABLE);
        assert!(v.client_enabled());
        assert!(!v.server_enabled());
        assert!(!v.client_no_cookie());
        assert!(!v.server_cookie_not_required());
        assert!(!v.server_all_listeners());
        assert_eq!(v.unknown_bits(), 0);
        assert!(v.ineffective_bits().is_empty());
    }

    #[test]
    fn all_known_bits() {
        let v = TcpFastopen(0x607);
        assert!(v.client_enabled() && v.server_enabled() && v.client_no_cookie());
        assert!(v.server_cookie_not_required() && v.server_all_listeners());
        assert_eq!(v.unknown_bits(), 0);
        let bits = v.bits();
        assert_eq!(bits.len(), 5);
        assert!(bits.iter().all(|b| b.set));
    }

    #[test]
    fn unknown_bits_are_reported() {
        let v = TcpFastopen(0x803);
        assert_eq!(v.unknown_bits(), 0x800);
        let bits = v.bits();
        assert_eq!(bits.len(), 6);
        let unk = bits.iter().find(|b| b.mask == 0x800).unwrap();
        assert_eq!(unk.name, "unknown");
        assert!(unk.set);
        // sorted by mask: 0x1 0x2 0x4 0x200 0x400 0x800
        let masks: Vec<u32> = bits.iter().map(|b| b.mask).collect();
        assert_eq!(masks, vec![0x1, 0x2, 0x4, 0x200, 0x400, 0x800]);
    }

    #[test]
    fn describe_one_line_per_bit() {
        let lines = TcpFastopen(3).describe();
        assert_eq!(lines.len(), 5);
        assert!(lines[0].starts_with("0x001 client set   TFO_CLIENT_ENABLE"), "{}", lines[0]);
        assert!(lines[1].starts_with("0x002 server set   TFO_SERVER_ENABLE"), "{}", lines[1]);
        assert!(lines[2].starts_with("0x004 client unset TFO_CLIENT_NO_COOKIE"), "{}", lines[2]);
        assert!(lines[3].starts_with("0x200 server unset TFO_SERVER_COOKIE_NOT_REQD"));
        assert!(lines[4].starts_with("0x400 server unset TFO_SERVER_WO_SOCKOPT1"));
        let lines = TcpFastopen(0x1000).describe();
        assert_eq!(lines.len(), 6);
        assert!(lines[5].starts_with("0x1000 ?      set   unknown"), "{}", lines[5]);
    }

    #[test]
    fn ineffective_combinations() {
        assert_eq!(TcpFastopen(0x4).ineffective_bits().len(), 1);
        assert_eq!(TcpFastopen(0x601).ineffective_bits().len(), 2);
        assert!(TcpFastopen(0x607).ineffective_bits().is_empty());
    }

    #[test]
    fn display_and_json() {
        assert_eq!(TcpFastopen(1027).to_string(), "1027 (0x403)");
        let j = serde_json::to_value(TcpFastopen(3)).unwrap();
        assert_eq!(j["value"], 3);
        assert_eq!(j["hex"], "0x3");
        assert_eq!(j["bits"][1]["name"], "TFO_SERVER_ENABLE");
        assert_eq!(j["bits"][1]["set"], true);
    }

    #[test]
    fn key_status() {
        // Format checked on Linux 6.18 with `sysctl -w net.ipv4.tcp_fastopen_key=...` in a netns.
        let none = FastopenKeyStatus::parse("00000000-00000000-00000000-00000000\n");
        assert_eq!(none, FastopenKeyStatus { primary: false, backup: false });
        let one = FastopenKeyStatus::parse("00112233-44556677-8899aabb-ccddeeff\n");
        assert_eq!(one, FastopenKeyStatus { primary: true, backup: false });
        let two = FastopenKeyStatus::parse(
            "00112233-44556677-8899aabb-ccddeeff,ffeeddcc-bbaa9988-77665544-33221100\n",
        );
        assert_eq!(two, FastopenKeyStatus { primary: true, backup: true });
        assert_eq!(FastopenKeyStatus::parse(""), FastopenKeyStatus { primary: false, backup: false });
    }

    #[test]
    fn reads_this_namespace() {
        // Whatever the value is, it must parse and match a direct read of the file.
        if let Ok(text) = std::fs::read_to_string(TCP_FASTOPEN_PATH) {
            let v = read_tcp_fastopen().unwrap();
            assert_eq!(v.0, text.trim().parse::<u32>().unwrap());
        }
        if Path::new(TCP_FASTOPEN_BLACKHOLE_TIMEOUT_PATH).exists() {
            read_blackhole_timeout_sec().unwrap();
        }
        let err = read_sysctl("/proc/sys/net/ipv4/does_not_exist").unwrap_err();
        assert!(err.to_string().contains("does_not_exist"));
    }

    #[test]
    fn key_persisted_in_a_conf_text() {
        assert!(sets_fastopen_key("net.ipv4.tcp_fastopen_key = 00000000-00000000-00000000-00000001\n"));
        assert!(sets_fastopen_key("# comment\n-net/ipv4/tcp_fastopen_key=1-2-3-4\n"));
        assert!(!sets_fastopen_key("# net.ipv4.tcp_fastopen_key = 1-2-3-4\n"));
        assert!(!sets_fastopen_key("net.ipv4.tcp_fastopen = 3\n"));
    }

    #[test]
    fn the_current_namespace_comes_first() {
        let all = tfo_namespaces();
        assert!(all[0].current && all[0].path == netns::SELF_NETNS, "{all:?}");
        assert_eq!(all[0].ip_netns_name(), Ok(None));
        let direct = std::fs::read_to_string(TCP_FASTOPEN_PATH).unwrap();
        assert_eq!(all[0].tcp_fastopen.as_ref().unwrap().0, direct.trim().parse::<u32>().unwrap());
        let unnamed =
            TfoNamespace { name: None, current: false, path: "/proc/7/ns/net".into(), ..all[0].clone() };
        assert!(unnamed.ip_netns_name().is_err());
        assert_eq!(unnamed.label(), "/proc/7/ns/net");
        let two = TfoNamespace { name: Some("a,b".into()), current: false, ..all[0].clone() };
        assert_eq!(two.ip_netns_name(), Ok(Some("a")));
    }
}
