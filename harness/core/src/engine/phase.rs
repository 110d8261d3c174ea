//! What the engine is doing for the case in flight, readable from another thread: a worker
//! that the supervisor kills for a timeout can have said whether the impl's run or kedge's own
//! host work (its inputs, its reference, its comparison) was taking the time.

use std::sync::atomic::{AtomicU8, Ordering};

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
}

/// No case in flight.
pub fn clear() {
    CURRENT.set(None);
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
}
