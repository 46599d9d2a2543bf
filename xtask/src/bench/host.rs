//! The host under the benchmark: how fast this VM's CPUs are at the moment, sampled once
//! per round and printed beside the figures they explain. On a shared VM both move from
//! one second to the next, and every per-connection figure moves with them.
use std::time::{Duration, Instant};

use super::stats::median;

/// How long a written cache line takes to reach another CPU, one way: two threads on CPU 0
/// and CPU 1 take turns incrementing one counter. Every ring-buffer record pays this, twice
/// or more (its lines move to the reader and back to the writer), so it is printed with
/// the figures it explains: machines of this kind differ in it by 3x, and one VM by as
/// much from one second to the next (40 or 240 ns: where the host runs its CPUs). The
/// median of 41 laps of 4096 turns: a lap in which either thread was preempted (the last
/// round's sockets still being torn down) does not count. None with one CPU, or when the
/// two threads did not take their turns within 10 s.
pub fn cache_line_transfer_ns() -> Option<f64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    const LAP: u64 = 4096;
    const LAPS: u64 = 41;
    /// Bounds the waiting where the other thread never gets a CPU.
    const GIVE_UP: Duration = Duration::from_secs(10);
    fn pin(cpu: usize) -> bool {
        // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }
    /// Takes the turns of parity `mine`, timing each lap; None if the other side stopped
    /// answering.
    fn take_turns(counter: &AtomicU64, mine: u64, deadline: Instant) -> Option<Vec<Duration>> {
        let mut laps = Vec::new();
        let mut lap_start = Instant::now();
        let mut n = mine;
        while n < LAP * LAPS {
            let mut spins = 0u32;
            while counter.load(Ordering::Acquire) != n {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(4096) && Instant::now() > deadline {
                    return None;
                }
                std::hint::spin_loop();
            }
            counter.store(n + 1, Ordering::Release);
            n += 2;
            if n.is_multiple_of(LAP) {
                laps.push(lap_start.elapsed());
                lap_start = Instant::now();
            }
        }
        Some(laps)
    }
    if std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) < 2 {
        return None;
    }
    let counter = &AtomicU64::new(0);
    let deadline = Instant::now() + GIVE_UP;
    // Both sides on threads of their own: pinning this one would pin every process the
    // benchmark starts after it.
    let [here, there] = std::thread::scope(|scope| {
        [0, 1]
            .map(|cpu| {
                scope.spawn(move || if pin(cpu) { take_turns(counter, cpu as u64, deadline) } else { None })
            })
            .map(|side| side.join().ok().flatten())
    });
    there?;
    let laps = here?.into_iter().map(|lap| lap.as_nanos() as f64 / LAP as f64);
    Some(median(laps))
}

/// Thread CPU time (ms) of a fixed piece of memory-bound work: a walk of 2,000,000 dependent
/// loads through a 4 MiB table in a scrambled order. The work never changes, so what its
/// time spreads over the rounds is the host's: the resolution a CPU-time ratio of two
/// runs can have here.
pub fn fixed_work_ms() -> f64 {
    const SLOTS: usize = 1 << 20;
    const STEPS: usize = 2_000_000;
    // A permutation with one cycle through every slot (Sattolo), from a fixed LCG seed.
    let mut next: Vec<u32> = (0..SLOTS as u32).collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for i in (1..SLOTS).rev() {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let j = (seed >> 33) as usize % i;
        next.swap(i, j);
    }
    let start = thread_cpu_ns();
    let mut at = 0u32;
    for _ in 0..STEPS {
        at = next[at as usize];
    }
    std::hint::black_box(at);
    (thread_cpu_ns() - start) as f64 / 1e6
}

/// This thread's CPU time (ns).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_line_crosses_between_two_cpus() {
        let ns = cache_line_transfer_ns();
        eprintln!("cache-line transfer: {ns:?} ns");
        if std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) < 2 {
            assert_eq!(ns, None, "one CPU: nothing to measure");
        } else {
            // A cache line moves in tens to hundreds of ns; this bounds a broken turn-taking.
            let ns = ns.expect("two CPUs take turns");
            assert!((1.0..100_000.0).contains(&ns), "{ns} ns");
        }
    }

    #[test]
    fn fixed_work_takes_cpu_time() {
        let ms = fixed_work_ms();
        eprintln!("fixed work: {ms:.1} ms");
        // 2,000,000 dependent loads take 1 ms at 0.5 ns each and 10 s at 5 us: outside that,
        // the walk was optimised away or the clock is not a CPU clock.
        assert!((1.0..10_000.0).contains(&ms), "{ms} ms");
    }
}
