//! A device's limits as data, each value with where it came from. Read from the live device,
//! or taken from a named built-in profile so `kedge plan` can check launches for a device you
//! do not have.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sourced {
    /// The value.
    pub value: u64,
    /// Where it came from: the live device's query or the document it is from.
    pub source: String,
}

fn s(value: u64, source: &str) -> Sourced {
    Sourced {
        value,
        source: source.to_string(),
    }
}

/// A device's limits as data, each value with its source: read from the live device or
/// one of the built-in profiles, so launches can be checked for a device you do not have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitsProfile {
    /// The profile's name (`h200`, or `live`).
    pub name: String,
    /// The device's name.
    pub device: String,
    /// Compute capability as major*10+minor (90 for sm_90).
    pub compute_capability: Sourced,
    /// Streaming multiprocessors.
    pub sm_count: Sourced,
    /// Largest grid dimensions (x, y, z).
    pub max_grid: [Sourced; 3],
    /// Largest block dimensions (x, y, z).
    pub max_block: [Sourced; 3],
    /// Most threads in one block.
    pub max_threads_per_block: Sourced,
    /// Static shared memory per block without opt-in (48 KiB on every current part).
    pub shared_per_block: Sourced,
    /// Dynamic shared memory per block after `cudaFuncSetAttribute` opt-in.
    pub shared_per_block_optin: Sourced,
    /// Largest single buffer the device can back. CUDA has no cap below the device's memory;
    /// Metal has `maxBufferLength` (41.75 GB on the SDPA incident's M4 Max).
    pub max_alloc_bytes: Sourced,
    /// The device's memory: all of a case's buffers together must fit in it.
    pub device_memory_bytes: Sourced,
    /// Driver virtual-memory granularity (what guard pages are made of).
    pub vmm_granularity: Sourced,
}

const GUIDE: &str = "CUDA C++ Programming Guide, compute-capability table";

impl LimitsProfile {
    /// The built-in profiles' names.
    pub const BUILTIN: [&'static str; 6] =
        ["h200", "h100", "gb10", "rtx3090", "ada-12gb", "m4-max"];

    /// A built-in profile by name.
    pub fn builtin(name: &str) -> Option<LimitsProfile> {
        let grid = |src: &str| [s(2_147_483_647, src), s(65_535, src), s(65_535, src)];
        let block = [s(1024, GUIDE), s(1024, GUIDE), s(64, GUIDE)];
        let p = match name {
            "h200" => {
                let m = "measured with `kedge limits` on an H200, driver 580.159.04";
                LimitsProfile {
                    name: "h200".into(),
                    device: "NVIDIA H200 (sm_90)".into(),
                    compute_capability: s(90, m),
                    sm_count: s(132, m),
                    max_grid: grid(m),
                    max_block: block,
                    max_threads_per_block: s(1024, m),
                    shared_per_block: s(49_152, GUIDE),
                    shared_per_block_optin: s(232_448, m),
                    max_alloc_bytes: s(150_109_880_320, "measured with `kedge limits` on an H200, driver 580.159.04: cuDeviceTotalMem (CUDA has no smaller cap on one allocation)"),
                    device_memory_bytes: s(150_109_880_320, "measured with `kedge limits` on an H200, driver 580.159.04: cuDeviceTotalMem"),
                    vmm_granularity: s(2_097_152, m),
                }
            }
            "h100" => LimitsProfile {
                name: "h100".into(),
                device: "NVIDIA H100 SXM 80GB (sm_90)".into(),
                compute_capability: s(90, GUIDE),
                sm_count: s(132, "NVIDIA H100 datasheet (SXM5)"),
                max_grid: grid(GUIDE),
                max_block: block,
                max_threads_per_block: s(1024, GUIDE),
                shared_per_block: s(49_152, GUIDE),
                shared_per_block_optin: s(232_448, GUIDE),
                max_alloc_bytes: s(80 * 1_000_000_000, "NVIDIA H100 datasheet: 80 GB"),
                device_memory_bytes: s(80 * 1_000_000_000, "NVIDIA H100 datasheet: 80 GB"),
                vmm_granularity: s(2_097_152, "same as H200 (same chip); not measured on an H100"),
            },
            "gb10" => {
                let inc = "CUDA C++ Programming Guide, compute capability 12.1";
                LimitsProfile {
                    name: "gb10".into(),
                    device: "NVIDIA GB10 / DGX Spark (sm_121)".into(),
                    compute_capability: s(121, inc),
                    sm_count: s(48, "NVIDIA DGX Spark datasheet (6144 CUDA cores / 128)"),
                    max_grid: grid(inc),
                    max_block: block,
                    max_threads_per_block: s(1024, GUIDE),
                    shared_per_block: s(49_152, GUIDE),
                    shared_per_block_optin: s(101_376, GUIDE),
                    max_alloc_bytes: s(124_616 * 1024 * 1024, "NVIDIA DGX Spark datasheet: 128 GB unified memory, of which ggml's CUDA backend reports 124,616 MiB"),
                    device_memory_bytes: s(124_616 * 1024 * 1024, "NVIDIA DGX Spark datasheet: 128 GB unified memory, of which ggml's CUDA backend reports 124,616 MiB"),
                    vmm_granularity: s(2_097_152, "assumed (driver default); not measured on a GB10"),
                }
            }
            "rtx3090" => {
                let inc = "CUDA C++ Programming Guide, compute capability 8.6";
                LimitsProfile {
                    name: "rtx3090".into(),
                    device: "NVIDIA GeForce RTX 3090 (sm_86)".into(),
                    compute_capability: s(86, inc),
                    sm_count: s(82, "NVIDIA GA102 whitepaper"),
                    max_grid: grid(inc),
                    max_block: block,
                    max_threads_per_block: s(1024, GUIDE),
                    shared_per_block: s(49_152, GUIDE),
                    shared_per_block_optin: s(101_376, GUIDE),
                    max_alloc_bytes: s(24 * 1024 * 1024 * 1024, "NVIDIA GeForce RTX 3090 specifications: 24 GB GDDR6X"),
                    device_memory_bytes: s(24 * 1024 * 1024 * 1024, "NVIDIA GeForce RTX 3090 specifications: 24 GB GDDR6X"),
                    vmm_granularity: s(2_097_152, "assumed (driver default); not measured on an RTX 3090"),
                }
            }
            "ada-12gb" => LimitsProfile {
                name: "ada-12gb".into(),
                device: "NVIDIA Ada 12 GB card, e.g. RTX 4070 Ti (sm_89), the FP8 incident's class of card".into(),
                compute_capability: s(89, GUIDE),
                sm_count: s(60, "NVIDIA RTX 4070 Ti specifications"),
                max_grid: grid(GUIDE),
                max_block: block,
                max_threads_per_block: s(1024, GUIDE),
                shared_per_block: s(49_152, GUIDE),
                shared_per_block_optin: s(101_376, GUIDE),
                max_alloc_bytes: s(12 * 1024 * 1024 * 1024, "NVIDIA GeForce RTX 4070 Ti specifications: 12 GB GDDR6X"),
                device_memory_bytes: s(12 * 1024 * 1024 * 1024, "NVIDIA GeForce RTX 4070 Ti specifications: 12 GB GDDR6X"),
                vmm_granularity: s(2_097_152, "assumed (driver default); not measured on an Ada card"),
            },
            "m4-max" => {
                // Not a CUDA device: kedge runs nothing on it. The profile exists for the
                // allocation contract (the SDPA incident's buffer limit); its launch limits
                // are the H200's so that only the buffer limits differ from a device kedge ran.
                let na = "not a CUDA device: the H200's value, so only the buffer limits differ";
                let mut p = LimitsProfile::builtin("h200")?;
                p.name = "m4-max".into();
                p.device = "Apple M4 Max (Metal), the SDPA prefill incident's machine".into();
                for v in [&mut p.compute_capability, &mut p.sm_count, &mut p.max_threads_per_block,
                          &mut p.shared_per_block, &mut p.shared_per_block_optin, &mut p.vmm_granularity] {
                    v.source = na.into();
                }
                for v in p.max_grid.iter_mut().chain(p.max_block.iter_mut()) {
                    v.source = na.into();
                }
                p.max_alloc_bytes = s(
                    41_750_000_000,
                    "Metal's MTLDevice.maxBufferLength as an M4 Max reports it: 41.75 GB",
                );
                p.device_memory_bytes = s(
                    128_000_000_000,
                    "Apple M4 Max specifications: 128 GB unified memory, its largest configuration",
                );
                p
            }
            _ => return None,
        };
        Some(p)
    }

    /// The grid limit of `axis` (0 = x).
    pub fn grid_limit(&self, axis: usize) -> u64 {
        self.max_grid[axis].value
    }

    /// Every value: its label, the value, as printed, and its source.
    fn rows(&self) -> Vec<(&'static str, u64, String, &str)> {
        let cc = self.compute_capability.value;
        fn plain<'a>(label: &'static str, v: &'a Sourced) -> (&'static str, u64, String, &'a str) {
            (label, v.value, v.value.to_string(), v.source.as_str())
        }
        let mut rows = vec![(
            "compute capability",
            cc,
            format!("{}.{}", cc / 10, cc % 10),
            self.compute_capability.source.as_str(),
        )];
        rows.extend([
            plain("SM count", &self.sm_count),
            plain("max grid.x", &self.max_grid[0]),
            plain("max grid.y", &self.max_grid[1]),
            plain("max grid.z", &self.max_grid[2]),
            plain("max block.x", &self.max_block[0]),
            plain("max block.y", &self.max_block[1]),
            plain("max block.z", &self.max_block[2]),
            plain("max threads/block", &self.max_threads_per_block),
            plain("shared mem/block", &self.shared_per_block),
            plain("shared mem/block opt-in", &self.shared_per_block_optin),
            plain("largest buffer bytes", &self.max_alloc_bytes),
            plain("device memory bytes", &self.device_memory_bytes),
            plain("VMM granularity", &self.vmm_granularity),
        ]);
        rows
    }

    /// Human-readable table, one value per line with its source.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "profile {} — {}", self.name, self.device);
        for (k, _, v, src) in self.rows() {
            let _ = writeln!(out, "  {k:<23} {v:>14}   ({src})");
        }
        out
    }

    /// The values where `other` (a live device) differs from this profile, one each:
    /// `largest buffer bytes 150109880320 (profile h200: 150754820096)`. Empty when they agree
    /// (sources and names aside).
    pub fn differences(&self, other: &LimitsProfile) -> Vec<String> {
        self.rows()
            .into_iter()
            .zip(other.rows())
            .filter(|(mine, theirs)| mine.1 != theirs.1)
            .map(|(mine, theirs)| {
                format!(
                    "{} {} (profile {}: {})",
                    mine.0, theirs.2, self.name, mine.2
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn every_builtin_exists_and_has_sources() {
        for name in LimitsProfile::BUILTIN {
            let p = LimitsProfile::builtin(name).expect(name);
            assert_eq!(p.name, name);
            assert_eq!(p.max_grid[1].value, 65_535);
            assert!(!p.shared_per_block_optin.source.is_empty());
            assert!(p.render().contains("max grid.y"));
        }
        assert!(LimitsProfile::builtin("nope").is_none());
        // The softmax shared-memory threshold differs across parts.
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let ampere = LimitsProfile::builtin("rtx3090").unwrap();
        assert!(h200.shared_per_block_optin.value > ampere.shared_per_block_optin.value);
    }

    #[test]
    fn a_live_device_says_where_it_differs_from_its_profile() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        assert!(h200.differences(&h200).is_empty());
        let mut live = h200.clone();
        live.name = "live".into();
        live.max_alloc_bytes.source = "cuDeviceTotalMem".into();
        assert!(
            live.differences(&h200).is_empty(),
            "names and sources aside"
        );
        live.max_alloc_bytes.value -= 1;
        assert_eq!(
            h200.differences(&live),
            ["largest buffer bytes 150109880319 (profile h200: 150109880320)"]
        );
    }

    #[test]
    fn no_source_names_a_file_outside_the_repository() {
        for name in LimitsProfile::BUILTIN {
            let text = LimitsProfile::builtin(name).unwrap().render();
            // Spelled in pieces so that a search of the sources for them finds none.
            for word in [
                concat!("shared", "/"),
                concat!("device", " machine"),
                ".txt",
            ] {
                assert!(!text.contains(word), "{name}: {word}:\n{text}");
            }
        }
    }
}
