//! What the host side of a big case costs on this machine: fresh memory faulted in (one
//! thread, all threads, all threads with transparent huge pages asked for) and the judge's
//! passes over a big f32 output. `cargo run --release -p kedge-core --example host_bench --
//! [log2 elements]` (default 2^29: a 2 GiB f32 output against a 4 GiB f64 reference).
use kedge_core::judge::compare::{compare, digest, poisoned_elements};
use kedge_core::{DType, HostTensor, Tolerance};
use rayon::prelude::*;
use std::time::Instant;

const PAGE: usize = 4096;

fn gbps(bytes: usize, t: Instant) -> String {
    let s = t.elapsed().as_secs_f64();
    format!("{s:.3} s, {:.2} GB/s", bytes as f64 / s / 1e9)
}

fn touch_serial(v: &mut [u8]) {
    for i in (0..v.len()).step_by(PAGE) {
        v[i] = 1;
    }
}

fn touch_parallel(v: &mut [u8]) {
    v.par_chunks_mut(2 << 20).for_each(touch_serial);
}

fn huge(v: &mut [u8]) -> i32 {
    let start = (v.as_ptr() as usize).next_multiple_of(2 << 20);
    let end = (v.as_ptr() as usize + v.len()) / (2 << 20) * (2 << 20);
    if end <= start {
        return -1;
    }
    // SAFETY: advice on pages inside `v`.
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) }
}

fn main() {
    let log2: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(29);
    let n = 1usize << log2;
    for f in [
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/kernel/mm/transparent_hugepage/defrag",
        "/sys/fs/cgroup/cpu.max",
    ] {
        let v = std::fs::read_to_string(f).unwrap_or_else(|e| e.to_string());
        println!("{f}: {}", v.trim());
    }
    println!(
        "threads: {} (rayon {})",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        rayon::current_num_threads()
    );
    let bytes = n * 8;
    let t = Instant::now();
    let mut v = vec![0u8; bytes];
    touch_serial(&mut v);
    println!("fault in {bytes} bytes, one thread: {}", gbps(bytes, t));
    drop(v);
    let t = Instant::now();
    let mut v = vec![0u8; bytes];
    touch_parallel(&mut v);
    println!("fault in {bytes} bytes, all threads: {}", gbps(bytes, t));
    drop(v);
    let t = Instant::now();
    let mut v = vec![0u8; bytes];
    let rc = huge(&mut v);
    touch_parallel(&mut v);
    println!(
        "fault in {bytes} bytes, all threads, MADV_HUGEPAGE (rc {rc}): {}",
        gbps(bytes, t)
    );
    let t = Instant::now();
    touch_parallel(&mut v);
    println!("touch again (no faults): {}", gbps(bytes, t));
    drop(v);
    let t = Instant::now();
    let reference: Vec<f64> = (0..n)
        .into_par_iter()
        .map(|i| ((i % 977) as f64) * 0.25 - 60.0)
        .collect();
    let vals: Vec<f32> = reference.par_iter().map(|&x| x as f32).collect();
    let out = HostTensor::from_f32(DType::F32, [64, (n / 64) as i64, 1, 1], &vals);
    drop(vals);
    println!(
        "setup 2^{log2} elements: {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let c = compare("dst", &out, &reference, Tolerance::F32);
    println!("compare: {}", gbps(n * 12, t));
    let t = Instant::now();
    let d = digest(&out);
    println!("digest: {}", gbps(n * 4, t));
    let t = Instant::now();
    let p = poisoned_elements(&out);
    println!("poisoned_elements: {}", gbps(n * 4, t));
    println!("{} {d} {p:?}", c.verdict);
}
