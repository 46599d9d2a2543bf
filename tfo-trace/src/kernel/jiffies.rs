//! The kernel's HZ (jiffies per second): blackhole detection stamps its pauses in jiffies
//! (`tfo_active_disable_stamp`), which the programs turn into an age in ms with it. No file
//! says HZ plainly (USER_HZ, what `getconf CLK_TCK` gives, is another figure): it is the
//! kernel's build configuration (`CONFIG_HZ`, in /boot/config-RELEASE where the
//! distribution installs it), or else measured from /proc/timer_list, which prints the
//! monotonic clock and jiffies together.
use std::{sync::OnceLock, time::Duration};

/// The HZ values kernels are built with (kernel/Kconfig.hz).
const BUILT_WITH: [u32; 4] = [100, 250, 300, 1000];

/// HZ, found once per run; None where neither source says it.
pub(crate) fn hz() -> Option<u32> {
    static HZ: OnceLock<Option<u32>> = OnceLock::new();
    *HZ.get_or_init(|| {
        let release = super::uname::uname().map(|u| u.release);
        let configured = release
            .and_then(|r| std::fs::read_to_string(format!("/boot/config-{r}")).ok())
            .and_then(|text| config_hz(&text));
        configured.or_else(measured_hz)
    })
}

/// `CONFIG_HZ=N` of a kernel's build configuration.
fn config_hz(config: &str) -> Option<u32> {
    config.lines().find_map(|l| l.strip_prefix("CONFIG_HZ=")).and_then(|v| v.trim().parse().ok())
}

/// HZ from two readings of /proc/timer_list 50 ms apart: the jiffies that passed over the
/// nanoseconds that did, rounded to the nearest value kernels are built with (within 10 %).
fn measured_hz() -> Option<u32> {
    let first = timer_list_clocks()?;
    std::thread::sleep(Duration::from_millis(50));
    let second = timer_list_clocks()?;
    nearest_hz(first, second)
}

/// (`now at N nsecs`, `jiffies: N`) of /proc/timer_list, read up to its first jiffies line.
fn timer_list_clocks() -> Option<(u64, u64)> {
    use std::io::{BufRead, BufReader};
    let file = std::fs::File::open("/proc/timer_list").ok()?;
    let mut now_ns = None;
    for line in BufReader::new(file).lines().map_while(Result::ok) {
        if let Some(rest) = line.strip_prefix("now at ") {
            now_ns = rest.split_whitespace().next().and_then(|n| n.parse().ok());
        } else if let Some(rest) = line.trim_start().strip_prefix("jiffies: ") {
            return Some((now_ns?, rest.trim().parse().ok()?));
        }
    }
    None
}

fn nearest_hz((ns0, j0): (u64, u64), (ns1, j1): (u64, u64)) -> Option<u32> {
    let secs = ns1.checked_sub(ns0)? as f64 / 1e9;
    if secs <= 0.0 {
        return None;
    }
    let rate = j1.checked_sub(j0)? as f64 / secs;
    BUILT_WITH.into_iter().find(|&hz| (rate - f64::from(hz)).abs() <= f64::from(hz) * 0.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hz_from_a_config_or_from_two_clock_readings() {
        assert_eq!(config_hz("CONFIG_HZ_250=y\nCONFIG_HZ=250\n"), Some(250));
        assert_eq!(config_hz("# CONFIG_HZ_1000 is not set\n"), None);
        // 50 ms at 250 Hz: 12 or 13 jiffies, as the readings fall.
        assert_eq!(nearest_hz((0, 4_295_000_000), (50_100_000, 4_295_000_013)), Some(250));
        assert_eq!(nearest_hz((0, 0), (50_000_000, 50)), Some(1000));
        assert_eq!(nearest_hz((0, 0), (50_000_000, 9)), None, "no kernel's HZ");
        assert_eq!(nearest_hz((5, 0), (5, 1)), None);
    }

    /// Where the machine has /proc/timer_list, the figure measured is one kernels use.
    #[test]
    fn this_kernels_hz_is_a_built_value() {
        if let Some(hz) = measured_hz() {
            assert!(BUILT_WITH.contains(&hz), "{hz}");
        }
    }
}
