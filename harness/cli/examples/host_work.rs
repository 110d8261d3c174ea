//! The host's share of a sweep, without a GPU: for each case of a plan (`kedge plan --json`) or
//! a corpus, what a worker does on the host around the device's part: draw the inputs, compute
//! the reference, and judge an output (the reference itself, written in the output's dtype:
//! the digest and the comparison read every element, as they do for a device's output). Each
//! reference key once, as a worker's cache does for the impls of one key.
//!
//! `GLIBC_TUNABLES=glibc.malloc.hugetlb=1 cargo run --release -p kedge --example host_work --
//! PLAN.jsonl [MIN_LOG2 MAX_LOG2]` (the tunable is the one a sweep gives its workers;
//! `RAYON_NUM_THREADS` sets the threads). Prints the seconds of each phase by op and by the
//! case's element count (log2), so the phase that dominates a suite's host work is seen on
//! any machine.
use kedge_core::contract::op::Role;
use kedge_core::engine::{ReferenceCache, ReferenceKey};
use kedge_core::judge::compare::{compare, digest};
use kedge_core::model::case::Case;
use kedge_core::HostTensor;
use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

#[derive(Default, Clone, Copy)]
struct Spent {
    cases: usize,
    inputs: f64,
    reference: f64,
    judge: f64,
}

impl Spent {
    fn add(&mut self, o: Spent) {
        self.cases += o.cases;
        self.inputs += o.inputs;
        self.reference += o.reference;
        self.judge += o.judge;
    }
    fn line(&self, label: &str) -> String {
        format!(
            "{label:24} {:6} {:9.2} {:9.2} {:9.2} {:9.2}",
            self.cases,
            self.inputs,
            self.reference,
            self.judge,
            self.inputs + self.reference + self.judge
        )
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: host_work PLAN.jsonl [MIN_LOG2 MAX_LOG2]")?;
    let lo: u32 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(0);
    let hi: u32 = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(64);
    let reg = kedge_ops::registry();
    let mut seen = HashSet::new();
    let mut by_op: BTreeMap<String, Spent> = BTreeMap::new();
    let mut by_size: BTreeMap<u32, Spent> = BTreeMap::new();
    for line in std::fs::read_to_string(path)?.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        let case: Case = serde_json::from_value(v.get("case").cloned().unwrap_or(v))?;
        let n = case
            .ne
            .iter()
            .fold(1u64, |a, &x| a.saturating_mul(x.max(1) as u64));
        let log2 = 63 - n.max(1).leading_zeros();
        if log2 < lo || log2 > hi {
            continue;
        }
        let key = ReferenceKey::of(&case);
        if !seen.insert(key) {
            continue;
        }
        let Ok(op) = reg.op(&case.op) else { continue };
        let mut refs = ReferenceCache::default();
        let t = Instant::now();
        let Ok((specs, inputs)) = refs.inputs(op, &case) else {
            continue;
        };
        let inputs_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let Ok(reference) = refs.reference(op, &case, &inputs) else {
            continue;
        };
        let reference_s = t.elapsed().as_secs_f64();
        let tol = op.tolerance(&case);
        let mut judge_s = 0.0;
        for (s, r) in specs
            .iter()
            .filter(|s| s.role == Role::Output)
            .zip(reference.iter())
        {
            let vals: Vec<f32> = r.iter().map(|&x| x as f32).collect();
            let out = HostTensor::from_f32(s.dtype, s.ne, &vals);
            let t = Instant::now();
            std::hint::black_box(digest(&out));
            std::hint::black_box(compare(&s.name, &out, r, tol));
            judge_s += t.elapsed().as_secs_f64();
        }
        let spent = Spent {
            cases: 1,
            inputs: inputs_s,
            reference: reference_s,
            judge: judge_s,
        };
        by_op.entry(case.op.clone()).or_default().add(spent);
        by_size.entry(log2).or_default().add(spent);
    }
    let head = format!(
        "{:24} {:>6} {:>9} {:>9} {:>9} {:>9}",
        "", "keys", "inputs_s", "ref_s", "judge_s", "total_s"
    );
    println!("{head}");
    let mut all = Spent::default();
    for (op, s) in &by_op {
        println!("{}", s.line(op));
        all.add(*s);
    }
    println!("{}", all.line("all"));
    println!("{head}");
    for (e, s) in &by_size {
        println!("{}", s.line(&format!("2^{e}")));
    }
    Ok(())
}
