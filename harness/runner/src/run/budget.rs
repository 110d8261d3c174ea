//! A time limit for a whole sweep (`kedge sweep --max-time 5m`).
//!
//! One [`TimeBudget`] is shared by everything that starts cases (the scheduler's queue, each
//! supervisor, the CPU side): once the time is up no new case starts; cases already running
//! finish (each within `--timeout`). The first case of the sweep always starts, so a limit too
//! small for one case still runs that one case, and the sweep says so.
//!
//! Time comes from a [`Clock`], so tests drive it by hand (a zero limit, or a clock that
//! counts cases) instead of sleeping.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a budget's time comes from.
pub trait Clock: Send + Sync {
    /// Time since the budget started.
    fn elapsed(&self) -> Duration;
}

/// The wall clock, from when it was made.
#[derive(Debug)]
struct WallClock(Instant);

impl WallClock {
    fn start() -> Self {
        WallClock(Instant::now())
    }
}

impl Clock for WallClock {
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// `--max-time`: a duration written `90s`, `5m`, `1h`, `1h30m`, `2.5m` or `0s` (a bare number
/// is seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxTime(pub Duration);

impl MaxTime {
    /// The parsed limit (`1h30m`: 5400 s).
    pub fn duration(self) -> Duration {
        self.0
    }
}

impl FromStr for MaxTime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("'{s}' is not a duration (expected e.g. 90s, 5m, 1h, 1h30m; units s, m, h)");
        let t = s.trim();
        if t.is_empty() {
            return Err(bad());
        }
        let mut total = 0f64;
        let mut rest = t;
        while !rest.is_empty() {
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            if end == 0 {
                return Err(bad());
            }
            let n: f64 = rest[..end].parse().map_err(|_| bad())?;
            rest = &rest[end..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(rest.len());
            let scale = match &rest[..unit_len] {
                // A bare number is seconds, but only alone: "1h30" is ambiguous.
                "" if total == 0.0 && end == t.len() => 1.0,
                "s" => 1.0,
                "m" | "min" => 60.0,
                "h" => 3600.0,
                _ => return Err(bad()),
            };
            rest = &rest[unit_len..];
            total += n * scale;
        }
        if !total.is_finite() || total > 1e9 {
            return Err(bad());
        }
        Ok(MaxTime(Duration::from_secs_f64(total)))
    }
}

impl fmt::Display for MaxTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&human_duration(self.0))
    }
}

/// `4m 59.2s`, `1h 2m 3s`, `12.5s`.
pub(crate) fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        return format!("{}s", (s * 10.0).round() / 10.0);
    }
    let whole = s.round() as u64;
    let (h, m, sec) = (whole / 3600, whole / 60 % 60, whole % 60);
    match (h, m, sec) {
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, 0) => format!("{h}h {m}m"),
        (h, m, s) => format!("{h}h {m}m {s}s"),
    }
}

/// The time a sweep may take, shared by whatever starts its cases.
pub struct TimeBudget {
    limit: Duration,
    clock: Arc<dyn Clock>,
    /// Some case has started.
    started: AtomicBool,
    /// Cases started under this budget.
    cases: AtomicUsize,
    /// The time was up before the first case: that one case ran anyway.
    first_past_limit: AtomicBool,
}

impl fmt::Debug for TimeBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimeBudget")
            .field("limit", &self.limit)
            .field("elapsed", &self.clock.elapsed())
            .field("cases", &self.cases.load(Ordering::SeqCst))
            .finish()
    }
}

impl TimeBudget {
    /// `limit` of wall time from now.
    pub fn new(limit: Duration) -> TimeBudget {
        TimeBudget::with_clock(limit, Arc::new(WallClock::start()))
    }

    /// `limit` of `clock`'s time.
    pub fn with_clock(limit: Duration, clock: Arc<dyn Clock>) -> TimeBudget {
        TimeBudget {
            limit,
            clock,
            started: AtomicBool::new(false),
            cases: AtomicUsize::new(0),
            first_past_limit: AtomicBool::new(false),
        }
    }

    pub(crate) fn limit(&self) -> Duration {
        self.limit
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.clock.elapsed()
    }

    /// Is the time up?
    pub(crate) fn is_up(&self) -> bool {
        self.clock.elapsed() >= self.limit
    }

    /// May a case start now? Yes while there is time, and for the sweep's first case whatever
    /// the time: a limit too small for one case still runs that one. Each `true` counts as a
    /// case started.
    fn may_start(&self) -> bool {
        let ok = if !self.is_up() {
            self.started.store(true, Ordering::SeqCst);
            true
        } else if !self.started.swap(true, Ordering::SeqCst) {
            self.first_past_limit.store(true, Ordering::SeqCst);
            true
        } else {
            false
        };
        if ok {
            self.cases.fetch_add(1, Ordering::SeqCst);
        }
        ok
    }

    /// Nothing more starts: the time is up and the first case has had its start. A queue
    /// hands out nothing more from here.
    pub(crate) fn exhausted(&self) -> bool {
        self.is_up() && self.started.load(Ordering::SeqCst)
    }

    /// Cases started under this budget.
    pub(crate) fn started(&self) -> usize {
        self.cases.load(Ordering::SeqCst)
    }

    /// The time was up before any case started (the limit, or the sweep's set-up, took it
    /// all): the first case ran anyway.
    pub(crate) fn first_past_limit(&self) -> bool {
        self.first_past_limit.load(Ordering::SeqCst)
    }
}

/// A budget, where a run has one: `None` starts every case.
pub(crate) fn may_start(b: Option<&TimeBudget>) -> bool {
    b.is_none_or(TimeBudget::may_start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A clock set by hand.
    struct Manual(Mutex<Duration>);
    impl Clock for Manual {
        fn elapsed(&self) -> Duration {
            *self.0.lock().unwrap()
        }
    }

    #[test]
    fn durations_parse_with_units_and_bad_ones_say_what_is_expected() {
        let d = |s: &str| s.parse::<MaxTime>().map(|m| m.0);
        assert_eq!(d("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(d("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(d("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(d("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(d("2.5m"), Ok(Duration::from_secs(150)));
        assert_eq!(d("0s"), Ok(Duration::ZERO));
        assert_eq!(d("45"), Ok(Duration::from_secs(45)));
        for bad in ["", "m", "5x", "-5m", "1h30", "5 m", "1e3s", "s5"] {
            let e = d(bad).unwrap_err();
            assert!(e.contains("90s, 5m, 1h"), "{bad:?}: {e}");
        }
        assert_eq!(MaxTime(Duration::from_secs(5400)).to_string(), "1h 30m");
        assert_eq!(human_duration(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(human_duration(Duration::from_secs(299)), "4m 59s");
    }

    #[test]
    fn no_case_starts_after_the_time_is_up_but_the_first_always_does() {
        let clock = Arc::new(Manual(Mutex::new(Duration::ZERO)));
        let b = TimeBudget::with_clock(Duration::from_secs(10), clock.clone());
        assert!(!b.exhausted());
        assert!(b.may_start() && b.may_start());
        *clock.0.lock().unwrap() = Duration::from_secs(10);
        assert!(b.is_up() && b.exhausted());
        assert!(!b.may_start());
        assert_eq!(b.started(), 2);
        assert!(!b.first_past_limit());

        // Up before anything started: exactly one case starts, and that is remembered.
        let b = TimeBudget::with_clock(Duration::ZERO, clock);
        assert!(!b.exhausted(), "the first case has not had its start");
        assert!(b.may_start());
        assert!(b.exhausted());
        assert!(!b.may_start());
        assert_eq!(b.started(), 1);
        assert!(b.first_past_limit());
        assert!(may_start(None));
    }
}
