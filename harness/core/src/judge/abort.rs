//! A library that aborts the process (ggml calls `abort()` on any CUDA error and on a failed
//! assertion) still gets a verdict: its own last words, captured by its abort hook, say what
//! happened. A CUDA error names the driver's answer; a failed assertion is a crash.

use crate::model::words::{Detector, Verdict};

/// The verdict and detector for a library's abort, from its message and the log lines before
/// it ("CUDA error: invalid argument", "current device: 0, in function ... at common.cuh:1668").
pub fn classify(message: &str, log: &[String]) -> (Verdict, Detector) {
    let all: Vec<&str> = std::iter::once(message)
        .chain(log.iter().map(String::as_str))
        .collect();
    let cuda = all.iter().find_map(|l| {
        l.split_once("CUDA error: ")
            .map(|(_, e)| e.trim().to_string())
    });
    match cuda {
        Some(e) => {
            let e = e.to_ascii_lowercase();
            if e.contains("out of memory") {
                (Verdict::ResourceLimit, Detector::Driver)
            } else if e.contains("illegal memory access")
                || e.contains("misaligned address")
                || e.contains("unspecified launch failure")
                || e.contains("illegal instruction")
                || e.contains("device-side assert")
            {
                (Verdict::DeviceFault, Detector::DeviceSync)
            } else {
                // invalid argument / invalid configuration / too many resources requested for
                // launch: the driver refused the launch, and ggml's check saw it.
                (Verdict::LaunchError, Detector::Driver)
            }
        }
        None => (Verdict::Crash, Detector::Abort),
    }
}

/// One line a person reads: the CUDA error or assertion, and where ggml says it happened.
pub fn summarize(message: &str, log: &[String]) -> String {
    let mut parts: Vec<String> = log
        .iter()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    if !message.trim().is_empty() {
        parts.push(message.trim().to_string());
    }
    parts.dedup();
    format!("the library aborted: {}", parts.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_errors_by_kind_and_asserts_as_crashes() {
        let launch = vec![
            "CUDA error: invalid argument".to_string(),
            "  current device: 0, in function ggml_cuda_kernel_launch at common.cuh:1668".into(),
        ];
        assert_eq!(
            classify("common.cuh:1668: CUDA error", &launch),
            (Verdict::LaunchError, Detector::Driver)
        );
        let fault = vec!["CUDA error: an illegal memory access was encountered".to_string()];
        assert_eq!(
            classify("ggml-cuda.cu:98: CUDA error", &fault),
            (Verdict::DeviceFault, Detector::DeviceSync)
        );
        let oom = vec!["CUDA error: out of memory".to_string()];
        assert_eq!(
            classify("x", &oom),
            (Verdict::ResourceLimit, Detector::Driver)
        );
        assert_eq!(
            classify(
                "ggml.c:1234: GGML_ASSERT(ggml_is_contiguous(a)) failed",
                &[]
            ),
            (Verdict::Crash, Detector::Abort)
        );
        let s = summarize("common.cuh:1668: CUDA error", &launch);
        assert!(
            s.contains("invalid argument") && s.contains("common.cuh:1668"),
            "{s}"
        );
    }
}
