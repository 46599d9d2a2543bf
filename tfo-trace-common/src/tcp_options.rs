//! The TFO cookie length a SYN's options carry, by the kernel's own rules: the fentry
//! backend's tcp_try_fastopen hook runs at exit only, when the kernel has overwritten the
//! cookie it parsed, so it parses the SYN's options again. Shared by the kernel program
//! and the host's unit tests.

/// Option kinds and lengths (include/net/tcp.h).
const TCPOPT_EOL: u8 = 0;
const TCPOPT_NOP: u8 = 1;
const TCPOPT_FASTOPEN: u8 = 34;
const TCPOPT_EXP: u8 = 254;
const TCPOPT_FASTOPEN_MAGIC: u16 = 0xF989;
const TCPOLEN_FASTOPEN_BASE: i32 = 2;
const TCPOLEN_EXP_FASTOPEN_BASE: i32 = 4;
const TCP_FASTOPEN_COOKIE_MIN: i32 = 4;
const TCP_FASTOPEN_COOKIE_MAX: i32 = 16;

/// The most option bytes a TCP header holds (doff 15).
pub const MAX_OPTION_BYTES: usize = 40;

/// What the SYN's TFO option said: `len` as tcp_parse_options() leaves `foc->len` (-1 no
/// option or a malformed one, 0 a cookie request, 4..=16 a cookie) and whether it was the
/// experimental option (254 with the magic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynCookie {
    pub len: i32,
    pub exp: bool,
}

/// Where the walk has stopped (EOL, or a malformed option): past every offset.
pub const STOPPED: usize = 255;

/// tcp_parse_options() (net/ipv4/tcp_input.c) over `length` option bytes, `byte(i)` the
/// i-th of them, for a SYN, as far as the TFO cookie goes: EOL ends the walk, NOP skips a
/// byte, a size below 2 or past the end stops it, kind 34 has the cookie in `size - 2`
/// bytes, kind 254 with the magic 0xF989 in `size - 4`; tcp_parse_fastopen_option()
/// ignores an odd or negative length, makes 1-3 or over 16 bytes -1; the last one wins.
/// Walked offset by offset ([`syn_option_step`]).
pub fn syn_cookie(length: usize, byte: impl Fn(usize) -> u8) -> SynCookie {
    let mut foc = SynCookie { len: -1, exp: false };
    let mut next = 0;
    for at in 0..MAX_OPTION_BYTES {
        syn_option_step(at, length, &mut next, &mut foc, &byte);
    }
    foc
}

/// One offset `at` of [`syn_cookie`]'s walk: whether an option starts there (`next`, where
/// the walk expects the next one, or [`STOPPED`]), and if so what it says. The kernel
/// program runs it at each of the 40 offsets as a constant, keeping `next` and `foc` in
/// map memory between them: every byte is read at a known offset and every step's paths
/// meet again, where a walk from option to option carried an offset whose range grew at
/// every step, and the 6.1 verifier gave up on it (1,000,000 instructions).
#[inline(always)]
pub fn syn_option_step(
    at: usize,
    length: usize,
    next: &mut usize,
    foc: &mut SynCookie,
    byte: &impl Fn(usize) -> u8,
) {
    let length = if length > MAX_OPTION_BYTES { MAX_OPTION_BYTES } else { length };
    if at >= length || at != *next {
        return; // past the end, inside an option, or stopped
    }
    let kind = byte(at);
    if kind == TCPOPT_EOL {
        *next = STOPPED;
        return;
    }
    if kind == TCPOPT_NOP {
        *next = at + 1;
        return;
    }
    let left = length - at;
    let size = if left < 2 { 0 } else { byte(at + 1) as usize };
    if size < 2 || size > left {
        *next = STOPPED; // no room for a size, a "silly" size, or a partial option
        return;
    }
    *next = at + size;
    // No Option here: the BPF backend may copy an unset payload (kernel::Access).
    let (len, exp) = if kind == TCPOPT_FASTOPEN {
        (size as i32 - TCPOLEN_FASTOPEN_BASE, false)
    } else if kind == TCPOPT_EXP
        && size as i32 >= TCPOLEN_EXP_FASTOPEN_BASE
        && u16::from_be_bytes([byte(at + 2), byte(at + 3)]) == TCPOPT_FASTOPEN_MAGIC
    {
        (size as i32 - TCPOLEN_EXP_FASTOPEN_BASE, true)
    } else {
        (-1, false) // another option: nothing to take
    };
    if len >= 0 && len & 1 == 0 {
        let len = if len == 0 || (TCP_FASTOPEN_COOKIE_MIN..=TCP_FASTOPEN_COOKIE_MAX).contains(&len) {
            len
        } else {
            -1
        };
        *foc = SynCookie { len, exp };
    }
}

/// Whether a TCP header's options could hold a TFO option: whether a byte among them is
/// one of its kinds (34, or 254 for the experimental one). `header` is the header as read
/// into eight aligned words (bytes 0..64, little-endian as BPF reads them), `options` the
/// option bytes after its 20 fixed ones. A plain SYN is let go after a few arithmetic
/// steps a word, without the option-by-option walk ([`syn_option_step`]); a byte that
/// only happens to be 34 or 254 (a timestamp's) sends the SYN on to the walk, which is
/// exact. Bytes outside the options (the checksum, what lies past the header) are read
/// as NOPs.
#[inline(always)]
pub fn options_may_hold_tfo(header: &[u64; 8], options: usize) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // A zero byte in `x`: the classic word-at-a-time test, exact for "any byte is zero".
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS != 0;
    let end = 20 + if options > MAX_OPTION_BYTES { MAX_OPTION_BYTES } else { options };
    let mut found = false;
    // Words 2..8 hold bytes 16..64; the options start at byte 20.
    for (i, &word) in header.iter().enumerate().skip(2) {
        let start = 8 * i;
        if start < end {
            let skip = 20usize.saturating_sub(start);
            let upto = if end - start < 8 { end - start } else { 8 };
            let below_end = if upto == 8 { u64::MAX } else { (1u64 << (8 * upto)) - 1 };
            let keep = below_end & (u64::MAX << (8 * skip));
            let word = (u64::from_le(word) & keep) | (ONES & !keep);
            found |= has_zero(word ^ (ONES * TCPOPT_FASTOPEN as u64))
                || has_zero(word ^ (ONES * TCPOPT_EXP as u64));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(opts: &[u8]) -> (i32, bool) {
        let c = syn_cookie(opts.len(), |i| opts.get(i).copied().unwrap_or(0));
        (c.len, c.exp)
    }

    // A SYN's usual options: MSS, SACK permitted, timestamps, NOP, window scale.
    const PLAIN: [u8; 20] = [2, 4, 5, 180, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7];

    /// `opts` as the kernel program reads a header: 64 bytes, 20 of header, `filler` past
    /// the options.
    fn header_with(opts: &[u8], filler: u8) -> [u64; 8] {
        let mut buf = [filler; 64];
        buf[..20].fill(34); // a checksum or port of 34 is no option
        buf[20..20 + opts.len()].copy_from_slice(opts);
        core::array::from_fn(|i| u64::from_le_bytes(buf[8 * i..8 * i + 8].try_into().unwrap()))
    }

    fn may_hold(opts: &[u8], filler: u8) -> bool {
        options_may_hold_tfo(&header_with(opts, filler), opts.len())
    }

    #[test]
    fn the_word_test_lets_a_plain_syn_go_and_never_a_tfo_one() {
        assert!(!may_hold(&PLAIN, 34), "a plain SYN, TFO kinds all around its options");
        assert!(!may_hold(&[], 254), "no options");
        // Every option list the walk finds a TFO option in, the word test sends on: a
        // deterministic spread of option bytes, with 34 or 254 at each offset.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut with_option = 0;
        for case in 0..20_000 {
            let len = case % (MAX_OPTION_BYTES + 1);
            let mut opts = [0u8; MAX_OPTION_BYTES];
            for b in opts.iter_mut().take(len) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = [1, 2, 4, 8, 10, 34, 254, 0xF9, 0x89, seed as u8][(seed >> 32) as usize % 10];
            }
            let found = parse(&opts[..len]).0 >= 0;
            with_option += found as u32;
            assert!(!found || may_hold(&opts[..len], 0), "{:?}", &opts[..len]);
        }
        assert!(with_option > 500, "the spread holds TFO options: {with_option}");
        for at in 0..MAX_OPTION_BYTES {
            for kind in [34u8, 254] {
                let mut opts = [1u8; MAX_OPTION_BYTES];
                opts[at] = kind;
                assert!(may_hold(&opts, 1), "{kind} at {at}");
                assert!(!may_hold(&opts[..at], kind), "{kind} just past {at} option bytes");
            }
        }
    }

    #[test]
    fn a_plain_syn_has_no_cookie() {
        assert_eq!(parse(&PLAIN), (-1, false));
        assert_eq!(parse(&[]), (-1, false));
    }

    #[test]
    fn rfc7413_option_request_and_cookie() {
        let mut request = PLAIN.to_vec();
        request.extend([34, 2, 1, 1]);
        assert_eq!(parse(&request), (0, false));
        let mut cookie = PLAIN.to_vec();
        cookie.extend([34, 10, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(parse(&cookie), (8, false));
        assert_eq!(parse(&[34, 18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), (16, false));
    }

    #[test]
    fn experimental_option_needs_its_magic() {
        assert_eq!(parse(&[254, 4, 0xF9, 0x89]), (0, true));
        assert_eq!(parse(&[254, 12, 0xF9, 0x89, 1, 2, 3, 4, 5, 6, 7, 8]), (8, true));
        assert_eq!(parse(&[254, 12, 0x12, 0x34, 1, 2, 3, 4, 5, 6, 7, 8]), (-1, false), "another experiment");
        assert_eq!(parse(&[254, 3, 0xF9]), (-1, false), "too short for the magic");
    }

    #[test]
    fn malformed_lengths_as_the_kernel_reads_them() {
        assert_eq!(parse(&[34, 5, 1, 2, 3]), (-1, false), "odd: ignored");
        assert_eq!(parse(&[34, 4, 1, 2]), (-1, false), "2 bytes: below the minimum");
        assert_eq!(
            parse(&[34, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            (-1, false),
            "18 bytes"
        );
        // An odd length leaves an earlier option's cookie as it was.
        assert_eq!(parse(&[34, 6, 1, 2, 3, 4, 34, 5, 1, 2, 3]), (4, false));
        // The last option wins.
        assert_eq!(parse(&[34, 6, 1, 2, 3, 4, 34, 2]), (0, false));
    }

    #[test]
    fn the_walk_stops_where_the_kernel_stops() {
        assert_eq!(parse(&[0, 34, 2]), (-1, false), "EOL first");
        assert_eq!(parse(&[1, 1, 34, 2]), (0, false), "NOPs skipped");
        assert_eq!(parse(&[8, 1, 34, 2]), (-1, false), "a size below 2 stops it");
        assert_eq!(parse(&[34, 10, 1, 2, 3, 4]), (-1, false), "past the end: not parsed");
        assert_eq!(parse(&[34]), (-1, false), "no room for a size");
        // Option bytes past `length` are not read.
        let c = syn_cookie(2, |i| [34, 2, 34, 6, 1, 2, 3, 4][i]);
        assert_eq!(c.len, 0);
    }

    #[test]
    fn at_most_forty_option_bytes() {
        let mut opts = [1u8; 44];
        opts[40] = 34;
        opts[41] = 2;
        assert_eq!(syn_cookie(44, |i| opts[i]).len, -1);
    }
}
