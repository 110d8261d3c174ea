//! What the engine is doing for the case in flight, readable from another thread: a worker
//! that the supervisor kills for a timeout can have said whether the impl's run or kedge's own
//! host work (its inputs, its reference, its comparison) was taking the time.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

/// A part of a case's work, in the order the engine does them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Planning, allocating.
    Setup,
    /// Drawing the inputs on the host (and quantizing them).
    Inputs,
    /// Copying inputs to the device, poisoning outputs (or drawing inputs there).
    Upload,
    /// The impl's own work: the kernels, or the library's compute.
    Run,
    /// Canaries and outputs back to the host.
    Download,
    /// kedge's reference (on the CPU, or a library's host backend).
    Reference,
    /// Comparing outputs with the reference.
    Compare,
}

const ALL: [Phase; 7] = [
    Phase::Setup,
    Phase::Inputs,
    Phase::Upload,
    Phase::Run,
    Phase::Download,
    Phase::Reference,
    Phase::Compare,
];

/// A phase or none, shared between threads.
struct Cell(AtomicU8);

impl Cell {
    /// 0: no case in flight; k: `ALL[k - 1]`.
    const fn new() -> Self {
        Cell(AtomicU8::new(0))
    }
    fn set(&self, p: Option<Phase>) {
        let k = p.map_or(0, |p| {
            ALL.iter().position(|&q| q == p).map_or(0, |i| i as u8 + 1)
        });
        self.0.store(k, Ordering::Relaxed);
    }
    fn get(&self) -> Option<Phase> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            k => ALL.get(k as usize - 1).copied(),
        }
    }
}

/// The process's case in flight (a worker runs one at a time).
static CURRENT: Cell = Cell::new();

/// Milliseconds spent in each phase (`ALL`'s order) since they were last taken, as `enter`
/// moves from one to the next on this thread: a library backend that enters `Upload` and
/// `Download` around its own copies gets them counted as such, not as its run.
struct Clock {
    at: Option<(Phase, Instant)>,
    spent: [f64; ALL.len()],
}

impl Clock {
    /// The phase in flight's time so far added to its total, its clock restarted.
    fn close(&mut self) {
        if let Some((p, t)) = self.at {
            if let Some(i) = ALL.iter().position(|&q| q == p) {
                self.spent[i] += t.elapsed().as_secs_f64() * 1e3;
            }
            self.at = Some((p, Instant::now()));
        }
    }
    fn enter(&mut self, p: Option<Phase>) {
        self.close();
        self.at = p.map(|p| (p, Instant::now()));
    }
    fn take(&mut self) -> Spent {
        self.close();
        Spent(std::mem::take(&mut self.spent))
    }
}

thread_local! {
    /// The thread's own: the engine and the backend it calls run a case on one thread, and
    /// the other threads of a process (a test binary's) keep theirs apart.
    static CLOCK: RefCell<Clock> = const {
        RefCell::new(Clock {
            at: None,
            spent: [0.0; ALL.len()],
        })
    };
}

/// The milliseconds spent in each phase over a stretch of a case's work (`take_spent`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent([f64; ALL.len()]);

impl Spent {
    /// Milliseconds in `p`.
    pub fn ms(&self, p: Phase) -> f64 {
        ALL.iter().position(|&q| q == p).map_or(0.0, |i| self.0[i])
    }
}

/// The time spent in each phase since the last call, and the count started again (the phase in
/// flight goes on).
pub fn take_spent() -> Spent {
    CLOCK.with(|c| c.borrow_mut().take())
}

impl Phase {
    /// The phase's name as written (`run`, `reference`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::Inputs => "inputs",
            Phase::Upload => "upload",
            Phase::Run => "run",
            Phase::Download => "download",
            Phase::Reference => "reference",
            Phase::Compare => "compare",
        }
    }

    /// Whose work the phase is: the impl's (the run) or kedge's (everything else).
    pub fn whose(self) -> &'static str {
        match self {
            Phase::Run => "the impl's own work: its kernels or its library's compute",
            Phase::Upload | Phase::Download => "kedge's copies to and from the device",
            Phase::Setup | Phase::Inputs | Phase::Reference | Phase::Compare => {
                "kedge's own host work, not the impl's"
            }
        }
    }

    /// The phase named `s`, if it is one.
    pub fn parse(s: &str) -> Option<Phase> {
        ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// The engine starts `p` for the case in flight.
pub fn enter(p: Phase) {
    CURRENT.set(Some(p));
    CLOCK.with(|c| c.borrow_mut().enter(Some(p)));
}

/// No case in flight.
pub fn clear() {
    CURRENT.set(None);
    CLOCK.with(|c| c.borrow_mut().enter(None));
}

/// The phase of the case in flight, if any.
pub fn current() -> Option<Phase> {
    CURRENT.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_entered_is_the_one_read_and_names_round_trip() {
        // A cell of its own: the process's is shared with every test that runs a case.
        let cell = Cell::new();
        assert_eq!(cell.get(), None);
        for p in ALL {
            cell.set(Some(p));
            assert_eq!(cell.get(), Some(p));
            assert_eq!(Phase::parse(p.as_str()), Some(p));
        }
        cell.set(None);
        assert_eq!(cell.get(), None);
        assert_eq!(Phase::parse("nap"), None);
        assert!(Phase::Run.whose().contains("impl"));
        assert!(Phase::Reference.whose().contains("not the impl"));
    }

    #[test]
    fn a_clock_counts_each_phase_from_its_entry_to_the_next() {
        // A clock of its own, as above.
        let mut c = Clock {
            at: None,
            spent: [0.0; ALL.len()],
        };
        c.enter(Some(Phase::Run));
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.enter(Some(Phase::Upload));
        std::thread::sleep(std::time::Duration::from_millis(30));
        c.enter(Some(Phase::Run));
        std::thread::sleep(std::time::Duration::from_millis(10));
        let s = c.take();
        assert!(s.ms(Phase::Upload) >= 30.0, "{s:?}");
        assert!(s.ms(Phase::Run) >= 30.0, "{s:?}");
        assert_eq!(s.ms(Phase::Download), 0.0);
        // Taken: counted again from zero, the phase in flight going on.
        std::thread::sleep(std::time::Duration::from_millis(5));
        c.enter(None);
        let t = c.take();
        assert!(
            t.ms(Phase::Run) >= 5.0 && t.ms(Phase::Upload) == 0.0,
            "{t:?}"
        );
        // No phase in flight: nothing counts.
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(c.take(), Spent::default());
    }
}
