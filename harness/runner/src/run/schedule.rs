//! Spreading cases over several devices (`kedge sweep --devices 0,1`).
//!
//! One shared queue; each device pulls its next batch the moment it is free. No case is
//! assigned to a device in advance, so no device idles while cases are waiting and a fast
//! device simply takes more. A device whose batch fails is given a few tries; once it is
//! lost, the cases it held and had not finished go back to the front of the queue for the
//! others. Every case is reported at most once, to one sink on the calling thread, with the
//! device that ran it.
//!
//! Nothing here knows about processes or CUDA: a device is anything implementing [`Runner`]
//! (a supervisor's worker pool in `kedge sweep`, fakes in the tests).

use super::budget::TimeBudget;
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::{mpsc, Condvar, Mutex, MutexGuard, PoisonError};

/// A device's name in reports: its GPU ordinal in `kedge sweep`.
pub type DeviceId = u32;

/// Why a batch did not finish.
#[derive(Debug)]
pub enum BatchError<E> {
    /// The device could not run (a worker would not start, the device is gone). The batch's
    /// unfinished cases go back to the queue; after `max_failures` of these in a row the
    /// device is lost.
    Device(E),
    /// A failure no other device would avoid (a sanitizer report that cannot be read): the
    /// whole run stops.
    Fatal(E),
}

/// One device: runs batches of cases, one at a time.
pub trait Runner<T> {
    /// What a finished case gives (a supervisor's: its `CaseResult`).
    type Output: Send;
    /// Why a batch did not finish, inside a [`BatchError`].
    type Error: std::error::Error + Send + Sync + 'static;
    /// Run `batch`, calling `done(k, output)` as soon as `batch[k]` has its final output.
    /// `Ok` means every case was reported; on `Err`, the cases not reported are run again
    /// elsewhere (or here, on a retry).
    fn run_batch(
        &mut self,
        batch: &[T],
        done: &mut dyn FnMut(usize, Self::Output),
    ) -> Result<(), BatchError<Self::Error>>;
    /// The cases at the front of the queue after the batch about to run (this device or
    /// another may take them): a hint of what to get ready for. The default ignores it.
    fn upcoming(&mut self, _next: &[T]) {}
}

/// Cases of the queue passed to `Runner::upcoming` before each batch.
const UPCOMING: usize = 8;

/// How cases are handed out and when a device is given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Cases handed out per pull. Small keeps devices level: 1 when a runner keeps its
    /// worker between batches; a sanitized worker's batch when each batch is a worker.
    pub(crate) batch: usize,
    /// Cases a pull is never cut below by the even share of what is left (`Queue::take`): a
    /// sanitized worker's batch, since every pull starts a worker there, and a smaller pull
    /// would start one for fewer cases.
    pub(crate) least: usize,
    /// Failed batches in a row after which a device is lost (a success resets the count).
    pub(crate) max_failures: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            batch: 1,
            least: 1,
            max_failures: 3,
        }
    }
}

/// A case's output, as the sink receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished<O> {
    /// Position of the case in the slice given to [`run`].
    index: usize,
    /// The device that ran it.
    pub device: DeviceId,
    /// What its runner gave for it.
    pub output: O,
}

/// What one device did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReport {
    pub(crate) device: DeviceId,
    /// Cases it finished.
    pub(crate) ran: usize,
    batches: usize,
    /// Time in its batches, from taking each off the queue to its last case done.
    pub(crate) busy: std::time::Duration,
    /// Every failed batch, oldest first (a device can fail and recover).
    failures: Vec<String>,
    /// Why it was given up, if it was.
    pub lost: Option<String>,
}

impl DeviceReport {
    fn new(device: DeviceId) -> Self {
        DeviceReport {
            device,
            ran: 0,
            batches: 0,
            busy: std::time::Duration::ZERO,
            failures: Vec::new(),
            lost: None,
        }
    }
}

/// A finished run: one report per device, in the order the devices were given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// What each device did, in the order the devices were given.
    pub devices: Vec<DeviceReport>,
    /// Positions (in the slice given to [`run`]) of the cases not started because the time
    /// budget ran out, ascending. Empty without a budget.
    not_run: Vec<usize>,
}

impl Summary {
    pub(crate) fn ran(&self) -> usize {
        self.devices.iter().map(|d| d.ran).sum()
    }
    pub(crate) fn lost(&self) -> impl Iterator<Item = &DeviceReport> {
        self.devices.iter().filter(|d| d.lost.is_some())
    }
}

/// Why a run stopped before every case was finished.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError<E: std::error::Error + 'static> {
    /// No device was given.
    #[error("no devices to run on")]
    NoDevices,
    /// Every device was lost with cases left.
    #[error(
        "every device was lost ({}); {} of {total} cases were not run",
        describe_lost(lost),
        not_run.len()
    )]
    AllLost {
        /// The lost devices' reports, each with why it was given up.
        lost: Vec<DeviceReport>,
        /// Positions (in the slice given to [`run`]) of the cases never finished, ascending.
        not_run: Vec<usize>,
        /// Cases given to the run.
        total: usize,
    },
    /// A device reported [`BatchError::Fatal`]: another device would do no better.
    #[error("device {device} stopped the run")]
    Fatal {
        /// The device that reported it.
        device: DeviceId,
        /// Its error.
        #[source]
        source: E,
    },
    /// The sink refused a result (a results file that cannot be written); nothing more was
    /// handed out.
    #[error("the sink could not take a result")]
    Sink(#[source] crate::results::OutputError),
}

fn describe_lost(lost: &[DeviceReport]) -> String {
    lost.iter()
        .map(|d| {
            format!(
                "device {} after {} cases: {}",
                d.device,
                d.ran,
                d.lost.as_deref().unwrap_or("lost")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The queue and what is out of it, shared by the device threads.
struct State {
    /// Positions of cases not handed out, front first. Cases given back go to the front.
    queue: VecDeque<usize>,
    /// Cases handed out and not yet finished or given back.
    in_flight: usize,
    /// Devices not lost.
    live: usize,
    /// Take nothing more (fatal error, sink failure, every device lost).
    stop: bool,
    /// Some batch was handed out.
    handed: bool,
}

struct Queue<'u> {
    state: Mutex<State>,
    changed: Condvar,
    /// The unit of each position: positions of one unit are handed out together.
    units: &'u [usize],
    /// Once it is exhausted, nothing more is handed out.
    budget: Option<&'u TimeBudget>,
}

impl Queue<'_> {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere never leaves the state half-updated (nothing panics while the
        // lock is held), so a poisoned lock still holds good data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next batch, waiting while the queue is empty but cases are still out (a device
    /// may yet give them back). `None`: nothing left to do, or stop.
    fn take(&self, n: usize, least: usize) -> Option<Vec<usize>> {
        let mut s = self.lock();
        loop {
            // Out of time: nothing more is handed out once something was (the first batch
            // goes out whatever the time, and its first case runs), and cases given back stay
            // in the queue: they are the ones not run.
            let out_of_time = self
                .budget
                .is_some_and(|b| b.is_up() && (s.handed || b.started() > 0));
            if s.stop || out_of_time {
                return None;
            }
            if !s.queue.is_empty() {
                // No more than an even share of what is left over the devices still running
                // (a pull of several sanitized batches would otherwise leave one device the
                // tail of the queue while the others idle), but not below `least`.
                let n = n.min(s.queue.len().div_ceil(s.live.max(1)).max(least));
                // Whole units: the first, then each next one that still fits in `n`.
                let mut batch: Vec<usize> = Vec::new();
                while let Some(&first) = s.queue.front() {
                    let unit = self.units[first];
                    let len = s
                        .queue
                        .iter()
                        .take_while(|&&i| self.units[i] == unit)
                        .count();
                    if !batch.is_empty() && batch.len() + len > n.max(1) {
                        break;
                    }
                    batch.extend(s.queue.drain(..len));
                }
                s.in_flight += batch.len();
                s.handed = true;
                return Some(batch);
            }
            if s.in_flight == 0 {
                return None;
            }
            s = self.changed.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The first `n` cases of the queue, left in it.
    fn peek(&self, n: usize) -> Vec<usize> {
        self.lock().queue.iter().take(n).copied().collect()
    }

    /// A batch of `handed` cases is over; `unfinished` go back to the front, in order.
    fn give_back(&self, handed: usize, unfinished: &[usize], lost: bool, stop: bool) {
        let mut s = self.lock();
        s.in_flight -= handed;
        for &i in unfinished.iter().rev() {
            s.queue.push_front(i);
        }
        if lost {
            s.live -= 1;
            if s.live == 0 {
                s.stop = true;
            }
        }
        s.stop |= stop;
        drop(s);
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }
}

/// Stops the run if a device thread unwinds, so the others do not wait forever for the
/// cases it held.
struct StopOnPanic<'a, 'u>(&'a Queue<'u>);

impl Drop for StopOnPanic<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop();
        }
    }
}

enum Event<O, E> {
    Done(Finished<O>),
    Fatal(DeviceId, E),
}

/// Run `cases` over `devices` (each on its own thread), passing every output to `sink` on
/// this thread as it arrives. Returns when every case is finished, or with the reason it
/// could not be: the sink failed, a device reported a fatal error, or every device was
/// lost (the error lists what was left).
pub fn run<T, R>(
    cases: &[T],
    devices: &mut [(DeviceId, R)],
    opts: Options,
    sink: impl FnMut(Finished<R::Output>) -> Result<(), crate::results::OutputError>,
) -> Result<Summary, ScheduleError<R::Error>>
where
    T: Clone + Sync,
    R: Runner<T> + Send,
{
    let units: Vec<usize> = (0..cases.len()).collect();
    run_units(cases, &units, devices, opts, None, sink)
}

/// [`run`], with cases handed out in units: `units[i]` names the unit of `cases[i]`, and a
/// device takes a unit's cases together, in order, in one batch (what one worker runs in a
/// row: cases sharing inputs and a reference, say). A unit's cases must be next to each
/// other in `cases`.
///
/// With a `budget`, no unit is handed out once it is exhausted; a batch its runner ended early
/// for lack of time is not a device failure. The cases never started are `Summary::not_run`.
pub(crate) fn run_units<T, R>(
    cases: &[T],
    units: &[usize],
    devices: &mut [(DeviceId, R)],
    opts: Options,
    budget: Option<&TimeBudget>,
    mut sink: impl FnMut(Finished<R::Output>) -> Result<(), crate::results::OutputError>,
) -> Result<Summary, ScheduleError<R::Error>>
where
    T: Clone + Sync,
    R: Runner<T> + Send,
{
    if devices.is_empty() {
        return Err(ScheduleError::NoDevices);
    }
    assert_eq!(units.len(), cases.len(), "one unit per case");
    let queue = Queue {
        units,
        budget,
        state: Mutex::new(State {
            queue: (0..cases.len()).collect(),
            in_flight: 0,
            live: devices.len(),
            stop: false,
            handed: false,
        }),
        changed: Condvar::new(),
    };
    let (Forwarded { sink_err, fatal }, reports) = std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let handles: Vec<_> = devices
            .iter_mut()
            .map(|(id, runner)| {
                let (id, tx, queue) = (*id, tx.clone(), &queue);
                s.spawn(move || device_loop(id, runner, cases, queue, opts, tx))
            })
            .collect();
        // `forward` returns when every device thread has dropped its sender.
        drop(tx);
        let forwarded = forward(rx, &queue, &mut sink);
        let reports = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect::<Vec<_>>();
        (forwarded, reports)
    });
    if let Some((device, source)) = fatal {
        return Err(ScheduleError::Fatal { device, source });
    }
    if let Some(e) = sink_err {
        return Err(ScheduleError::Sink(e));
    }
    let (mut left, live): (Vec<usize>, usize) = {
        let s = queue.lock();
        (s.queue.iter().copied().collect(), s.live)
    };
    left.sort_unstable();
    if !left.is_empty() && live == 0 {
        return Err(ScheduleError::AllLost {
            lost: reports.into_iter().filter(|d| d.lost.is_some()).collect(),
            not_run: left,
            total: cases.len(),
        });
    }
    // Cases are left only when the budget ran out (otherwise a live device takes them).
    Ok(Summary {
        devices: reports,
        not_run: left,
    })
}

/// What the calling thread made of the devices' events: the sink's first failure, and the
/// first fatal error.
struct Forwarded<E> {
    sink_err: Option<crate::results::OutputError>,
    fatal: Option<(DeviceId, E)>,
}

/// Pass each finished case to `sink` on this thread, until the sink fails (then the queue
/// stops), and keep the first fatal error; returns once every sender is gone.
fn forward<O, E>(
    rx: mpsc::Receiver<Event<O, E>>,
    queue: &Queue<'_>,
    sink: &mut impl FnMut(Finished<O>) -> Result<(), crate::results::OutputError>,
) -> Forwarded<E> {
    let mut sink_err = None;
    let mut fatal = None;
    for ev in rx {
        match ev {
            Event::Done(f) => {
                if sink_err.is_none() {
                    if let Err(e) = sink(f) {
                        sink_err = Some(e);
                        queue.stop();
                    }
                }
            }
            Event::Fatal(d, e) => {
                fatal.get_or_insert((d, e));
            }
        }
    }
    Forwarded { sink_err, fatal }
}

fn device_loop<T: Clone, R: Runner<T>>(
    id: DeviceId,
    runner: &mut R,
    cases: &[T],
    queue: &Queue<'_>,
    opts: Options,
    tx: mpsc::Sender<Event<R::Output, R::Error>>,
) -> DeviceReport {
    let _guard = StopOnPanic(queue);
    let mut report = DeviceReport::new(id);
    let mut failures_in_row = 0;
    while let Some(batch) = queue.take(opts.batch, opts.least) {
        let taken = std::time::Instant::now();
        let next: Vec<T> = queue
            .peek(UPCOMING)
            .iter()
            .map(|&i| cases[i].clone())
            .collect();
        runner.upcoming(&next);
        let items: Vec<T> = batch.iter().map(|&i| cases[i].clone()).collect();
        let mut finished = vec![false; batch.len()];
        let res = runner.run_batch(&items, &mut |k, output| {
            // A position reported twice (or out of range) is a runner bug: keep the first.
            if let Some(f) = finished.get_mut(k).filter(|f| !**f) {
                *f = true;
                report.ran += 1;
                // The receiver lives until every device thread has ended.
                let _ = tx.send(Event::Done(Finished {
                    index: batch[k],
                    device: id,
                    output,
                }));
            }
        });
        report.batches += 1;
        report.busy += taken.elapsed();
        let unfinished: Vec<usize> = batch
            .iter()
            .zip(&finished)
            .filter(|(_, f)| !**f)
            .map(|(&i, _)| i)
            .collect();
        let failure = match res {
            Ok(()) if unfinished.is_empty() => None,
            // The runner stopped starting cases: the time is up. Not the device's fault.
            Ok(()) if queue.budget.is_some_and(TimeBudget::is_up) => None,
            Ok(()) => Some(format!(
                "the batch ended without a result for {} of its {} cases",
                unfinished.len(),
                batch.len()
            )),
            Err(BatchError::Device(e)) => Some(e.to_string()),
            Err(BatchError::Fatal(e)) => {
                report.failures.push(e.to_string());
                let _ = tx.send(Event::Fatal(id, e));
                queue.give_back(batch.len(), &unfinished, false, true);
                return report;
            }
        };
        match failure {
            None => {
                failures_in_row = 0;
                queue.give_back(batch.len(), &unfinished, false, false);
            }
            Some(why) => {
                failures_in_row += 1;
                report.failures.push(why.clone());
                let lost = failures_in_row >= opts.max_failures.max(1);
                if lost {
                    report.lost = Some(why);
                }
                queue.give_back(batch.len(), &unfinished, lost, false);
                if lost {
                    return report;
                }
            }
        }
    }
    report
}

/// `--devices 0,1`: GPU ordinals, each once, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceList(Vec<DeviceId>);

/// A `--devices` list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceListError {
    /// No ordinal at all.
    #[error("--devices: no GPU given; expected ordinals separated by commas, e.g. 0,1")]
    Empty,
    /// An item is not a non-negative integer.
    #[error("--devices '{list}': '{item}' is not a GPU ordinal (expected e.g. 0,1)")]
    NotOrdinal {
        /// The list as given.
        list: String,
        /// The item that is not an ordinal, trimmed.
        item: String,
    },
    /// A GPU listed twice: two worker pools on one GPU would be two GPUs in the results.
    #[error("--devices '{list}': GPU {ordinal} is listed twice")]
    Duplicate {
        /// The list as given.
        list: String,
        /// The GPU listed twice.
        ordinal: DeviceId,
    },
}

impl DeviceList {
    /// These ordinals, in this order: refused when empty or when one is there twice.
    pub fn new(ordinals: Vec<DeviceId>) -> Result<DeviceList, DeviceListError> {
        let list = ordinals
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        Self::checked(ordinals, &list)
    }
    fn checked(ordinals: Vec<DeviceId>, list: &str) -> Result<DeviceList, DeviceListError> {
        if ordinals.is_empty() {
            return Err(DeviceListError::Empty);
        }
        for (k, &d) in ordinals.iter().enumerate() {
            // Two pools on one GPU would be two GPUs in the results.
            if ordinals[..k].contains(&d) {
                return Err(DeviceListError::Duplicate {
                    list: list.to_string(),
                    ordinal: d,
                });
            }
        }
        Ok(DeviceList(ordinals))
    }
    /// The ordinals, in the order given.
    pub fn ordinals(&self) -> &[DeviceId] {
        &self.0
    }
}

impl FromStr for DeviceList {
    type Err = DeviceListError;
    fn from_str(s: &str) -> Result<DeviceList, DeviceListError> {
        if s.trim().is_empty() {
            return Err(DeviceListError::Empty);
        }
        let ordinals = s
            .split(',')
            .map(|item| {
                item.trim()
                    .parse::<DeviceId>()
                    .map_err(|_| DeviceListError::NotOrdinal {
                        list: s.to_string(),
                        item: item.trim().to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::checked(ordinals, s)
    }
}

impl fmt::Display for DeviceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s: Vec<String> = self.0.iter().map(u32::to_string).collect();
        f.write_str(&s.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct FakeError(String);

    /// A simulated device: `pause` per case; dead after `dies_after` cases (every later
    /// batch fails at once, as a lost GPU's workers do); `fail_once`: its first batch fails
    /// (a worker that would not start). `starting` is set when it begins a case; `gate` holds
    /// each case until it is set (at most 5 s, so a broken scheduler fails the test rather
    /// than hanging it).
    #[derive(Default)]
    struct Fake {
        pause: Duration,
        dies_after: Option<usize>,
        fail_once: bool,
        fatal: bool,
        starting: Option<Arc<AtomicBool>>,
        gate: Option<Arc<AtomicBool>>,
        /// Where it records each batch it is handed.
        batches: Option<Arc<Mutex<Vec<Vec<String>>>>>,
        /// Asked before each case, as a supervisor asks.
        budget: Option<Arc<TimeBudget>>,
        /// Advanced by one second for each case it finishes.
        clock: Option<Arc<CaseClock>>,
        ran: usize,
    }

    /// A clock that reads one second per case finished.
    #[derive(Default)]
    struct CaseClock(std::sync::atomic::AtomicU64);
    impl crate::run::budget::Clock for CaseClock {
        fn elapsed(&self) -> Duration {
            Duration::from_secs(self.0.load(Ordering::SeqCst))
        }
    }

    impl Runner<String> for Fake {
        type Output = String;
        type Error = FakeError;
        fn run_batch(
            &mut self,
            batch: &[String],
            done: &mut dyn FnMut(usize, String),
        ) -> Result<(), BatchError<FakeError>> {
            if let Some(b) = &self.batches {
                b.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(batch.to_vec());
            }
            if self.fatal {
                return Err(BatchError::Fatal(FakeError("report unreadable".into())));
            }
            if std::mem::take(&mut self.fail_once) {
                return Err(BatchError::Device(FakeError("worker did not start".into())));
            }
            for (k, case) in batch.iter().enumerate() {
                if self.dies_after.is_some_and(|n| self.ran >= n) {
                    return Err(BatchError::Device(FakeError("device lost".into())));
                }
                if !crate::run::budget::may_start(self.budget.as_deref()) {
                    return Ok(());
                }
                if let Some(s) = &self.starting {
                    s.store(true, Ordering::SeqCst);
                }
                if let Some(g) = &self.gate {
                    let t0 = std::time::Instant::now();
                    while !g.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(5) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                std::thread::sleep(self.pause);
                self.ran += 1;
                if let Some(c) = &self.clock {
                    c.0.fetch_add(1, Ordering::SeqCst);
                }
                done(k, format!("ran {case}"));
            }
            Ok(())
        }
    }

    /// A fake device that records each batch it is handed in `seen`.
    fn recording(seen: &Arc<Mutex<Vec<Vec<String>>>>) -> Fake {
        Fake {
            pause: Duration::from_millis(2),
            batches: Some(seen.clone()),
            ..Fake::default()
        }
    }

    /// The sizes of the batches `seen` recorded, in the order they were handed out.
    fn sizes(seen: &Mutex<Vec<Vec<String>>>) -> Vec<usize> {
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(Vec::len)
            .collect()
    }

    fn cases(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("case-{i:03}")).collect()
    }

    /// Run, collecting outputs by case id and asserting none arrives twice.
    fn sweep(
        cases: &[String],
        devices: &mut [(DeviceId, Fake)],
        opts: Options,
    ) -> (
        BTreeMap<String, DeviceId>,
        Result<Summary, ScheduleError<FakeError>>,
    ) {
        let mut by_id = BTreeMap::new();
        let res = run(cases, devices, opts, |f| {
            assert_eq!(f.output, format!("ran {}", cases[f.index]));
            let old = by_id.insert(cases[f.index].clone(), f.device);
            assert!(old.is_none(), "{} reported twice", cases[f.index]);
            Ok(())
        });
        (by_id, res)
    }

    fn count(by_id: &BTreeMap<String, DeviceId>, d: DeviceId) -> usize {
        by_id.values().filter(|&&x| x == d).count()
    }

    #[test]
    fn two_equal_devices_share_the_work() {
        let all = cases(40);
        let fake = || Fake {
            pause: Duration::from_millis(2),
            ..Fake::default()
        };
        let mut devs = vec![(0, fake()), (1, fake())];
        let (by_id, res) = sweep(&all, &mut devs, Options::default());
        let s = res.unwrap();
        assert_eq!(by_id.len(), 40);
        assert_eq!(s.ran(), 40);
        // Neither device was starved; the split is not exact (threads race for the queue).
        for d in [0, 1] {
            assert!(count(&by_id, d) >= 8, "{s:?}");
            assert_eq!(s.devices[d as usize].ran, count(&by_id, d));
        }
        assert!(s.lost().next().is_none());
    }

    /// Each device's time in its pulls covers the cases it ran (2 ms each here), so the
    /// slots' time in pulls against the wall shows where a slot had nothing to take.
    #[test]
    fn a_device_counts_its_time_in_pulls() {
        let all = cases(20);
        let fake = || Fake {
            pause: Duration::from_millis(2),
            ..Fake::default()
        };
        let mut devs = vec![(0, fake()), (1, fake())];
        let (_, res) = sweep(&all, &mut devs, Options::default());
        let s = res.unwrap();
        for d in &s.devices {
            assert!(
                d.busy >= Duration::from_millis(2) * d.ran as u32,
                "{} cases in {:?}",
                d.ran,
                d.busy
            );
        }
    }

    #[test]
    fn a_free_device_never_waits_for_a_busy_one() {
        // Device 0 is stuck on its first case until device 1 has run every other case: with
        // any split decided in advance, device 1 would stop at its share and device 0's gate
        // would open only on its 5 s limit, with most of the cases still to run.
        let all = cases(30);
        let (started, release) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let mut devs = vec![
            (
                0,
                Fake {
                    starting: Some(started.clone()),
                    gate: Some(release.clone()),
                    ..Fake::default()
                },
            ),
            // Device 1 starts only once device 0 holds a case, so the test does not depend
            // on which thread reaches the queue first.
            (
                1,
                Fake {
                    gate: Some(started),
                    ..Fake::default()
                },
            ),
        ];
        let mut order = Vec::new();
        let res = run(&all, &mut devs, Options::default(), |f| {
            order.push(f.device);
            if order.len() == 29 {
                release.store(true, Ordering::SeqCst);
            }
            Ok(())
        });
        let s = res.unwrap();
        assert_eq!(s.devices[0].ran, 1, "{s:?}");
        assert_eq!(s.devices[1].ran, 29, "{s:?}");
        // Device 0's one case finished last: device 1 ran everything else meanwhile.
        assert_eq!(order.last(), Some(&0));
    }

    #[test]
    fn a_fast_device_takes_more_cases() {
        let all = cases(30);
        let started = Arc::new(AtomicBool::new(false));
        let mut devs = vec![
            (
                0,
                Fake {
                    pause: Duration::from_millis(40),
                    starting: Some(started.clone()),
                    ..Fake::default()
                },
            ),
            // Waits for the slow one's first case: otherwise it may drain the queue before
            // the slow thread has even started, which proves nothing.
            (
                1,
                Fake {
                    pause: Duration::from_millis(1),
                    gate: Some(started),
                    ..Fake::default()
                },
            ),
        ];
        let (by_id, res) = sweep(&all, &mut devs, Options::default());
        res.unwrap();
        assert_eq!(by_id.len(), 30);
        let (slow, fast) = (count(&by_id, 0), count(&by_id, 1));
        assert!(slow >= 1 && fast > 3 * slow, "slow {slow}, fast {fast}");
    }

    #[test]
    fn a_unit_goes_to_one_device_in_one_batch_in_order() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut devices: Vec<(DeviceId, Fake)> = (0..3).map(|d| (d, recording(&seen))).collect();
        let cases = cases(10);
        // Units: {0,1,2} {3} {4,5} {6} {7,8,9}.
        let units = [0, 0, 0, 1, 2, 2, 3, 4, 4, 4];
        let mut n = 0;
        run_units(
            &cases,
            &units,
            &mut devices,
            Options::default(),
            None,
            |_| {
                n += 1;
                Ok(())
            },
        )
        .expect("runs");
        assert_eq!(n, 10);
        let mut batches = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        batches.sort();
        let want: Vec<Vec<String>> = [&[0, 1, 2][..], &[3], &[4, 5], &[6], &[7, 8, 9]]
            .iter()
            .map(|u| u.iter().map(|&i| cases[i].clone()).collect())
            .collect();
        assert_eq!(batches, want);
        // A batch of 4 takes the whole units that fit in 4 cases.
        seen.lock().unwrap_or_else(PoisonError::into_inner).clear();
        let mut one = vec![(0, recording(&seen))];
        let opts = Options {
            batch: 4,
            ..Options::default()
        };
        run_units(&cases, &units, &mut one, opts, None, |_| Ok(())).expect("runs");
        assert_eq!(sizes(&seen), vec![4, 3, 3]);
    }

    /// The sizes of the pulls two recording devices took for `n` cases under `opts`, each
    /// case run once.
    fn pull_sizes(n: usize, opts: Options) -> Vec<usize> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut devices: Vec<(DeviceId, Fake)> = (0..2).map(|d| (d, recording(&seen))).collect();
        let (by_id, res) = sweep(&cases(n), &mut devices, opts);
        res.expect("runs");
        assert_eq!(by_id.len(), n);
        let got = sizes(&seen);
        assert_eq!(got.iter().sum::<usize>(), n);
        got
    }

    #[test]
    fn a_pull_is_no_more_than_an_even_share_of_what_is_left() {
        // Pulls of up to 8 cases (several sanitized batches) over two devices: 10 cases are
        // never 8 on one device and 2 on the other, whatever the race for the queue.
        let got = pull_sizes(
            10,
            Options {
                batch: 8,
                ..Options::default()
            },
        );
        assert_eq!(got.iter().max(), Some(&5), "{got:?}");
        // Never cut below `least` (one sanitized worker's batch) while that many are left: 20
        // cases in pulls of up to 12 over two devices, none of fewer than 4 but the last.
        let got = pull_sizes(
            20,
            Options {
                batch: 12,
                least: 4,
                ..Options::default()
            },
        );
        assert_eq!(got.iter().max(), Some(&10), "{got:?}");
        assert!(got.iter().filter(|&&n| n < 4).count() <= 1, "{got:?}");
    }

    #[test]
    fn once_the_time_is_up_nothing_more_starts_and_the_rest_is_named() {
        // One second per case, three seconds of budget: cases 0, 1 and 2 start (at 0, 1 and
        // 2 s); case 3, the second of its unit, does not, and neither does anything after.
        let clock = Arc::new(CaseClock::default());
        let budget = Arc::new(TimeBudget::with_clock(
            Duration::from_secs(3),
            clock.clone(),
        ));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut devs = vec![(
            0,
            Fake {
                budget: Some(budget.clone()),
                clock: Some(clock),
                batches: Some(seen.clone()),
                ..Fake::default()
            },
        )];
        let all = cases(10);
        let units = [0, 0, 1, 1, 2, 3, 4, 5, 5, 6];
        let mut got = Vec::new();
        let s = run_units(
            &all,
            &units,
            &mut devs,
            Options::default(),
            Some(&budget),
            |f| {
                got.push(f.index);
                Ok(())
            },
        )
        .expect("a run out of time is not an error");
        assert_eq!(got, vec![0, 1, 2]);
        assert_eq!(s.ran(), 3);
        assert_eq!(s.not_run, (3..10).collect::<Vec<_>>());
        assert!(s.devices[0].failures.is_empty(), "{s:?}");
        assert!(s.devices[0].lost.is_none());
        // The unit cut short was the last one handed out.
        assert_eq!(seen.lock().unwrap_or_else(PoisonError::into_inner).len(), 2);
        assert_eq!(budget.started(), 3);
        assert!(!budget.first_past_limit());
    }

    #[test]
    fn a_budget_spent_before_the_start_runs_exactly_one_case() {
        let budget = Arc::new(TimeBudget::with_clock(
            Duration::ZERO,
            Arc::new(CaseClock::default()),
        ));
        let fake = || Fake {
            budget: Some(budget.clone()),
            ..Fake::default()
        };
        let mut devs = vec![(0, fake()), (1, fake())];
        let all = cases(6);
        let units: Vec<usize> = (0..6).collect();
        let mut got = Vec::new();
        let s = run_units(
            &all,
            &units,
            &mut devs,
            Options::default(),
            Some(&budget),
            |f| {
                got.push(f.index);
                Ok(())
            },
        )
        .expect("runs");
        // The front of the queue, whichever device took it.
        assert_eq!(got, vec![0]);
        assert_eq!(s.not_run, vec![1, 2, 3, 4, 5]);
        assert!(s.devices.iter().all(|d| d.failures.is_empty()), "{s:?}");
        assert!(budget.first_past_limit());
    }

    #[test]
    fn a_dead_device_hands_its_unfinished_cases_to_the_other() {
        // Batches of 4; device 0 dies after 5 cases, in the middle of its second batch: the
        // 3 cases it held and had not run go back to the queue, and device 1 runs them.
        let all = cases(24);
        let mut devs = vec![
            (
                0,
                Fake {
                    dies_after: Some(5),
                    pause: Duration::from_millis(1),
                    ..Fake::default()
                },
            ),
            (
                1,
                Fake {
                    pause: Duration::from_millis(3),
                    ..Fake::default()
                },
            ),
        ];
        let opts = Options {
            batch: 4,
            max_failures: 2,
            ..Options::default()
        };
        let (by_id, res) = sweep(&all, &mut devs, opts);
        let s = res.unwrap();
        // Every case exactly once (the sink asserts no repeats), none lost.
        assert_eq!(by_id.keys().cloned().collect::<Vec<_>>(), all);
        assert_eq!(count(&by_id, 0), 5);
        assert_eq!(count(&by_id, 1), 19);
        let d0 = &s.devices[0];
        assert_eq!(d0.lost.as_deref(), Some("device lost"));
        assert_eq!(d0.failures.len(), 2, "{d0:?}");
        assert!(s.devices[1].lost.is_none());
    }

    #[test]
    fn a_device_that_fails_once_is_not_lost() {
        let all = cases(10);
        let mut devs = vec![(
            3,
            Fake {
                fail_once: true,
                ..Fake::default()
            },
        )];
        let (by_id, res) = sweep(&all, &mut devs, Options::default());
        let s = res.unwrap();
        assert_eq!(by_id.len(), 10);
        assert_eq!(s.devices[0].failures, vec!["worker did not start"]);
        assert!(s.devices[0].lost.is_none());
    }

    #[test]
    fn when_every_device_dies_the_error_says_what_was_left() {
        let all = cases(20);
        let dying = |n| Fake {
            dies_after: Some(n),
            ..Fake::default()
        };
        let mut devs = vec![(0, dying(3)), (1, dying(4))];
        let (by_id, res) = sweep(&all, &mut devs, Options::default());
        let e = res.unwrap_err();
        assert_eq!(by_id.len(), 7, "the finished cases were all reported");
        let ScheduleError::AllLost {
            lost,
            not_run,
            total,
        } = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!(*total, 20);
        assert_eq!(lost.len(), 2);
        // Exactly the cases without a result are named, once each.
        let left: Vec<&String> = not_run.iter().map(|&i| &all[i]).collect();
        let expected: Vec<&String> = all.iter().filter(|c| !by_id.contains_key(*c)).collect();
        assert_eq!(left, expected);
        let msg = e.to_string();
        assert!(msg.starts_with("every device was lost"), "{msg}");
        assert!(msg.contains("device 0 after 3 cases: device lost"), "{msg}");
        assert!(msg.contains("device 1 after 4 cases: device lost"), "{msg}");
        assert!(msg.ends_with("13 of 20 cases were not run"), "{msg}");
    }

    #[test]
    fn a_fatal_error_or_a_failing_sink_stops_the_run() {
        let all = cases(50);
        let mut devs = vec![
            (
                0,
                Fake {
                    fatal: true,
                    ..Fake::default()
                },
            ),
            (
                1,
                Fake {
                    pause: Duration::from_millis(1),
                    ..Fake::default()
                },
            ),
        ];
        let (by_id, res) = sweep(&all, &mut devs, Options::default());
        match res {
            Err(ScheduleError::Fatal { device: 0, source }) => {
                assert_eq!(source.to_string(), "report unreadable")
            }
            other => panic!("{other:?}"),
        }
        assert!(by_id.len() < 50);

        let mut devs = vec![(0, Fake::default())];
        let mut seen = 0;
        let res = run(&all, &mut devs, Options::default(), |_| {
            seen += 1;
            Err(crate::results::OutputError::write(
                "results.jsonl",
                std::io::Error::other("disk full"),
            ))
        });
        assert!(matches!(res, Err(ScheduleError::Sink(_))), "{res:?}");
        assert_eq!(seen, 1, "nothing is passed on after the sink fails");
    }

    #[test]
    fn no_cases_or_no_devices() {
        let mut devs = vec![(0, Fake::default())];
        let s = run(&[] as &[String], &mut devs, Options::default(), |_| Ok(())).unwrap();
        assert_eq!(s.ran(), 0);
        let mut none: Vec<(DeviceId, Fake)> = Vec::new();
        let res = run(&cases(1), &mut none, Options::default(), |_| Ok(()));
        assert!(matches!(res, Err(ScheduleError::NoDevices)));
    }

    #[test]
    fn device_lists_parse_and_bad_ones_say_why() {
        let l: DeviceList = "0,1".parse().unwrap();
        assert_eq!(l.ordinals(), &[0, 1]);
        assert_eq!(l.to_string(), "0,1");
        assert_eq!(" 3 , 1 ".parse::<DeviceList>().unwrap().ordinals(), &[3, 1]);
        assert_eq!("7".parse::<DeviceList>().unwrap().ordinals(), &[7]);
        let e = "a,b".parse::<DeviceList>().unwrap_err();
        assert_eq!(
            e,
            DeviceListError::NotOrdinal {
                list: "a,b".into(),
                item: "a".into()
            }
        );
        assert!(e.to_string().contains("'a' is not a GPU ordinal"), "{e}");
        for bad in ["", " ", "0,", ",1", "0,,1", "-1", "1.5"] {
            assert!(bad.parse::<DeviceList>().is_err(), "{bad:?}");
        }
        assert_eq!("".parse::<DeviceList>(), Err(DeviceListError::Empty));
        assert!(matches!(
            "0,1,0".parse::<DeviceList>(),
            Err(DeviceListError::Duplicate { ordinal: 0, .. })
        ));
        assert!(DeviceList::new(vec![]).is_err());
        assert_eq!(DeviceList::new(vec![2, 0]).unwrap().to_string(), "2,0");
    }
}
