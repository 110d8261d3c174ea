//! What a run was, recorded with every verdict it wrote (`CaseResult::run`) and in every
//! baseline made from it: the kedge build, the limits profile its cases were built for, how
//! they ran (the run mode), where the impls came from, and the suite. Results and baselines
//! that disagree on the profile, the mode or the suite cannot be judged against each other;
//! another build of the same impls (a ggml pull request against its base commit) is the
//! normal case, and is only said.

use serde::{Deserialize, Serialize};

/// The metadata of one run (a sweep), the same on every verdict it wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// kedge's version (`0.1.0`).
    pub kedge: String,
    /// The git commit kedge was built from (`-dirty` after it where tracked files had changes;
    /// `unknown` when it was built from no checkout).
    pub commit: String,
    /// The limits profile the cases were built for (`h200`).
    pub profile: String,
    /// How the cases ran: what ran them (`cpu` for the CPU-side checks, `native`, or the
    /// sanitizer tool; several joined with `+`) and the allocation modes (`exact`, `guard`,
    /// several joined with `,`), as `native/exact`, `native/guard`, `memcheck/exact`,
    /// `cpu/exact`.
    pub mode: String,
    /// Where the impls came from: `kedge` (kedge's own kernels), `plugin FILE`, `source FILE`,
    /// `ggml VERSION (COMMIT)` (a ggml build).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub impls: Vec<String>,
    /// The suite the cases are of; absent for cases run one by one (`kedge run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<SuiteInfo>,
}

/// Which suite a run's cases are of: the same on every machine and every shard of it. Two
/// suites are the same when their count and digest are (the name says how it was asked for).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteInfo {
    /// The suite and the flags that shape it: `default`, `default -o rms_norm --impl ggml:CPU`,
    /// `corpus corpora/incidents.jsonl`.
    pub name: String,
    /// Cases in the whole suite (every shard together).
    pub cases: usize,
    /// The first 16 hex digits of the SHA-256 of the suite's case ids, sorted, one a line: the
    /// same cases give the same digest.
    pub digest: String,
}

impl SuiteInfo {
    /// The suite `name` of the cases with these ids.
    pub fn of<'a>(name: impl Into<String>, ids: impl IntoIterator<Item = &'a str>) -> SuiteInfo {
        use sha2::{Digest, Sha256};
        let mut ids: Vec<&str> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut h = Sha256::new();
        for id in &ids {
            h.update(id.as_bytes());
            h.update(b"\n");
        }
        let digest: String = h
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        SuiteInfo {
            name: name.into(),
            cases: ids.len(),
            digest,
        }
    }
}

impl std::fmt::Display for SuiteInfo {
    /// `default (909 cases, 3fa2c1d4e5f60718)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} cases, {})", self.name, self.cases, self.digest)
    }
}

impl RunInfo {
    /// The build that made the results: `kedge 0.1.0 (e538bd6a91c0), ggml 0.21.0 (d99724f)`.
    pub fn build(&self) -> String {
        // Twelve digits of the hash, and a `-dirty` after it where the tree had changes.
        let (hash, rest) = self
            .commit
            .split_at(self.commit.find('-').unwrap_or(self.commit.len()));
        let commit: String = hash.chars().take(12).chain(rest.chars()).collect();
        let mut s = format!("kedge {} ({commit})", self.kedge);
        for i in self.impls.iter().filter(|i| i.as_str() != "kedge") {
            s.push_str(", ");
            s.push_str(i);
        }
        s
    }

    /// What the results are: `profile h200, mode native/exact, suite default (909 cases, ...)`.
    pub fn what(&self) -> String {
        let mut s = format!("profile {}, mode {}", self.profile, self.mode);
        if let Some(suite) = &self.suite {
            s.push_str(&format!(", suite {suite}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suite_digest_is_of_its_ids_in_any_order() {
        let a = SuiteInfo::of("default", ["b", "a", "c"]);
        let b = SuiteInfo::of("default", ["c", "b", "a", "a"]);
        assert_eq!(a, b);
        assert_eq!(a.cases, 3);
        assert_eq!(a.digest.len(), 16);
        assert_ne!(a.digest, SuiteInfo::of("default", ["a", "b"]).digest);
        assert!(a.to_string().starts_with("default (3 cases, "), "{a}");
    }

    #[test]
    fn the_build_names_kedge_and_the_libraries() {
        let r = RunInfo {
            kedge: "0.1.0".into(),
            commit: "e538bd6a91c0ffee0000".into(),
            profile: "h200".into(),
            mode: "native/exact".into(),
            impls: vec!["kedge".into(), "ggml 0.21.0 (d99724f)".into()],
            suite: None,
        };
        assert_eq!(
            r.build(),
            "kedge 0.1.0 (e538bd6a91c0), ggml 0.21.0 (d99724f)"
        );
        assert_eq!(r.what(), "profile h200, mode native/exact");
        // A build from a tree with changes says so after the hash.
        let dirty = RunInfo {
            commit: "5d3d7c937756a49776f7e10df243ed7c3076aaa8-dirty".into(),
            impls: Vec::new(),
            ..r
        };
        assert_eq!(dirty.build(), "kedge 0.1.0 (5d3d7c937756-dirty)");
    }
}
