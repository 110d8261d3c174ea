//! `--shard K/N`: split a suite over N machines. A case's shard depends only on its own id
//! (a hash of the case line), so adding or removing cases never moves the others, and each
//! case lands in exactly one shard. `kedge report` merges the shards' results files.

use kedge_core::Case;
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// A `--shard` value that names no shard; each variant holds the value as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// Not two integers around a `/`.
    #[error("--shard '{0}': expected K/N, e.g. 2/4 (1-based K)")]
    Format(String),
    /// N is 0.
    #[error("--shard '{0}': N must be at least 1")]
    ZeroCount(String),
    /// K is 0 or past N.
    #[error("--shard '{spec}': K must be between 1 and {count} (K is 1-based)")]
    IndexOutOfRange {
        /// The value as given.
        spec: String,
        /// N.
        count: u32,
    },
}

/// Shard K of N, K 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    index: u32,
    count: u32,
}

impl Shard {
    /// Shard `index` (1-based) of `count`; refused unless 1 <= index <= count.
    pub fn new(index: u32, count: u32) -> Result<Shard, ShardError> {
        let spec = format!("{index}/{count}");
        if count == 0 {
            return Err(ShardError::ZeroCount(spec));
        }
        if index == 0 || index > count {
            return Err(ShardError::IndexOutOfRange { spec, count });
        }
        Ok(Shard { index, count })
    }
    /// The whole suite: shard 1 of 1.
    pub fn all() -> Shard {
        Shard { index: 1, count: 1 }
    }
    /// 1-based.
    pub fn index(self) -> u32 {
        self.index
    }
    /// How many shards the suite is split into (N).
    pub fn count(self) -> u32 {
        self.count
    }
    /// Does this shard own the case with this id?
    fn owns_id(self, id: &str) -> bool {
        shard_of_id(id, self.count) == self.index
    }
    /// Does this shard own this case? Pass the validated case (defaults filled), so the id
    /// is the one its result line will carry.
    fn owns(self, case: &Case) -> bool {
        self.owns_id(&case.id())
    }
    /// Keep this shard's cases, in their order.
    pub(crate) fn select(self, cases: Vec<Case>) -> Vec<Case> {
        cases.into_iter().filter(|c| self.owns(c)).collect()
    }
    /// Keep this shard's items of any kind, by the id `id_of` gives.
    pub fn select_by<T>(self, items: Vec<T>, id_of: impl Fn(&T) -> String) -> Vec<T> {
        items
            .into_iter()
            .filter(|t| self.owns_id(&id_of(t)))
            .collect()
    }
}

/// The 1-based shard (of `count`) that owns `id`: SHA-256 of the id, first 8 bytes, mod N.
/// SHA-256 rather than std's hasher: the value must not change between Rust versions or
/// machines, or two machines of one CI matrix would disagree.
fn shard_of_id(id: &str, count: u32) -> u32 {
    let d = Sha256::digest(id.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    (u64::from_be_bytes(b) % u64::from(count.max(1))) as u32 + 1
}

impl FromStr for Shard {
    type Err = ShardError;
    fn from_str(s: &str) -> Result<Shard, ShardError> {
        let bad = || ShardError::Format(s.to_string());
        let (k, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let k: u32 = k.trim().parse().map_err(|_| bad())?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(ShardError::ZeroCount(s.to_string()));
        }
        if k == 0 || k > n {
            return Err(ShardError::IndexOutOfRange {
                spec: s.to_string(),
                count: n,
            });
        }
        Ok(Shard { index: k, count: n })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::DType;

    fn cases(n: i64) -> Vec<Case> {
        (1..=n)
            .map(|i| Case::new("rms_norm", "ggml", DType::F32, [64, 1, i, 1]))
            .collect()
    }

    #[rstest::rstest]
    #[case("")]
    #[case("2")]
    #[case("2/")]
    #[case("/4")]
    #[case("a/4")]
    #[case("2/b")]
    #[case("-1/4")]
    #[case("2/4/1")]
    #[case("1.5/4")]
    fn a_spec_that_is_not_k_of_n_is_a_format_error(#[case] bad: &str) {
        assert!(
            matches!(bad.parse::<Shard>(), Err(ShardError::Format(_))),
            "{bad}"
        );
    }

    #[test]
    fn parses_k_of_n_and_rejects_bad_specs() {
        let s: Shard = "2/4".parse().unwrap();
        assert_eq!((s.index(), s.count()), (2, 4));
        assert_eq!(s.to_string(), "2/4");
        assert_eq!(" 1 / 1 ".parse::<Shard>().unwrap(), Shard::all());
        assert!(matches!(
            "1/0".parse::<Shard>(),
            Err(ShardError::ZeroCount(_))
        ));
        let e = "0/4".parse::<Shard>().unwrap_err();
        assert!(e.to_string().contains("1-based"), "{e}");
        assert!(matches!(
            "5/4".parse::<Shard>(),
            Err(ShardError::IndexOutOfRange { count: 4, .. })
        ));
        assert!(Shard::new(0, 3).is_err() && Shard::new(3, 3).is_ok());
    }

    #[test]
    fn shards_cover_each_case_exactly_once() {
        let all = cases(500);
        for n in [1u32, 2, 3, 7, 16] {
            let mut seen = std::collections::HashMap::new();
            let mut sizes = Vec::new();
            for k in 1..=n {
                let part = Shard::new(k, n).unwrap().select(all.clone());
                sizes.push(part.len());
                for c in part {
                    *seen.entry(c.id()).or_insert(0) += 1;
                }
            }
            assert_eq!(seen.len(), all.len(), "n={n}");
            assert!(seen.values().all(|&v| v == 1), "n={n}");
            // A hash split is roughly even: no shard empty or holding most of the suite.
            if n > 1 {
                let fair = all.len() / n as usize;
                assert!(
                    sizes.iter().all(|&s| s > fair / 3 && s < fair * 3),
                    "n={n} {sizes:?}"
                );
            }
        }
    }

    #[test]
    fn adding_cases_does_not_move_existing_ones() {
        let before = cases(200);
        let after = cases(300);
        for k in 1..=4 {
            let s = Shard::new(k, 4).unwrap();
            let a: Vec<String> = s.select(before.clone()).iter().map(Case::id).collect();
            let b: Vec<String> = s.select(after.clone()).iter().map(Case::id).collect();
            assert!(a.iter().all(|id| b.contains(id)), "shard {s}");
        }
    }

    #[test]
    fn partition_is_deterministic_and_order_preserving() {
        let all = cases(100);
        let s = Shard::new(2, 3).unwrap();
        let a = s.select(all.clone());
        assert_eq!(a, s.select(all.clone()));
        let pos: Vec<usize> = a
            .iter()
            .map(|c| all.iter().position(|x| x == c).unwrap())
            .collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]));
        // The function, not only the filter, is pinned: a known id's shard never changes.
        assert_eq!(shard_of_id("abc", 1), 1);
        // Values computed independently (Python hashlib: sha256, first 8 bytes big-endian,
        // mod N, plus 1): machines with other builds must agree.
        assert_eq!(shard_of_id("3fa2c1d4e5f6", 8), 4);
        assert_eq!(shard_of_id("abc", 5), 5);
        let ids: Vec<String> = (0..10).map(|i| format!("id{i}")).collect();
        let sel = s.select_by(ids.clone(), |x| x.clone());
        assert!(sel.iter().all(|i| s.owns_id(i)));
    }
}
