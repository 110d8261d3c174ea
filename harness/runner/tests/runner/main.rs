//! kedge-runner's integration tests, in one binary (one link) with a module per subject.
//! Tests that need a GPU are ignored unless asked for (`-- --ignored` on a GPU machine);
//! tests that compile kernels are ignored when the build found no libnvrtc / nvcc.

mod common;
mod external_gpu;
mod fuzz_replay;
mod half_types;
mod incidents;
mod known_failures;
mod minimize_cpu;
mod multi_gpu;
mod out_of_room;
mod plugin_loader;
mod report_golden;
mod repro_golden;
mod sanitized_attribution;
mod sanitizer;
mod sanitizer_h200;
mod source_impl;
mod supervisor;
mod sweep;
mod time_limit;
