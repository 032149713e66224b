//! CPU time of processes, read from `/proc`, so that benchmarks can report what a
//! replicated command costs in CPU summed over every process of the cluster.
//!
//! `/proc/PID/stat` gives a process's user and system time (all its threads) in clock
//! ticks (`sysconf(_SC_CLK_TCK)`, 100 per second on Linux): 10 ms resolution, so a
//! measurement window must be long enough for the processes to use many ticks (a
//! benchmark's measured seconds are).

use serde::Serialize;

/// User and system CPU time of a process, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuTime {
    pub user_us: u64,
    pub system_us: u64,
}

impl CpuTime {
    pub fn total_us(&self) -> u64 {
        self.user_us + self.system_us
    }

    /// The time used since `before` (zero where a counter went back: a process that
    /// was replaced by another with the same pid).
    pub fn since(&self, before: &CpuTime) -> CpuTime {
        CpuTime {
            user_us: self.user_us.saturating_sub(before.user_us),
            system_us: self.system_us.saturating_sub(before.system_us),
        }
    }

    pub fn add(&self, other: &CpuTime) -> CpuTime {
        CpuTime {
            user_us: self.user_us + other.user_us,
            system_us: self.system_us + other.system_us,
        }
    }
}

/// Clock ticks per second of `/proc/PID/stat`'s times.
pub fn ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Parse the user and system ticks out of a `/proc/PID/stat` line. The second field
/// (the command name) is in parentheses and may hold spaces and parentheses itself,
/// so the fields are counted from the last `)`.
pub fn parse_stat_ticks(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime field 14, stime field 15.
    let utime = fields.get(14 - 3)?.parse().ok()?;
    let stime = fields.get(15 - 3)?.parse().ok()?;
    Some((utime, stime))
}

/// The CPU time process `pid` has used so far, or `None` if it is not running here.
pub fn process_cpu(pid: u32) -> Option<CpuTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (u, s) = parse_stat_ticks(&stat)?;
    let us_per_tick = 1_000_000 / ticks_per_s();
    Some(CpuTime {
        user_us: u * us_per_tick,
        system_us: s * us_per_tick,
    })
}

/// The summed CPU time of `pids` (those not running here count nothing).
pub fn processes_cpu(pids: &[u32]) -> CpuTime {
    pids.iter()
        .filter_map(|&p| process_cpu(p))
        .fold(CpuTime::default(), |a, b| a.add(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let line = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    731 52 0 0 20 0 3 0 12345 0 0";
        assert_eq!(parse_stat_ticks(line), Some((731, 52)));
        assert_eq!(parse_stat_ticks("1 (x) S 1 2"), None);
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn this_process_uses_cpu() {
        let before = process_cpu(std::process::id()).expect("our own /proc entry");
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(60) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = process_cpu(std::process::id()).unwrap();
        assert!(
            after.since(&before).total_us() > 0,
            "60 ms of spinning used no CPU"
        );
        assert_eq!(process_cpu(u32::MAX), None);
    }
}
