//! compute-sanitizer's text output (what it prints to stdout/stderr, each line prefixed
//! `========= `). Memcheck's text says how far past which allocation an access landed
//! ("and is 1 bytes after the nearest allocation at 0x... of size 4000 bytes"); the XML
//! record may not, so the text is parsed for that and matched to XML records by address.

use super::{AllocationHint, Direction, Record};

/// One error block of the text output.
#[derive(Debug, Clone, PartialEq)]
pub struct TextRecord {
    /// The first line: `Invalid __global__ read of size 4 bytes`.
    pub header: String,
    /// From the header's `of size N bytes`: bytes of the access.
    pub size: Option<u64>,
    /// From the header's `read` or `write`.
    pub direction: Option<Direction>,
    /// From `at KERNEL+0xPC`.
    pub kernel: Option<String>,
    /// From `by thread (x,y,z)`.
    pub thread: Option<[u64; 3]>,
    block: Option<[u64; 3]>,
    /// From `Address 0x... is out of bounds` (or `Access at 0x...`).
    pub address: Option<String>,
    /// From `N bytes after the nearest allocation at A of size S bytes`, on any line of the
    /// block.
    pub allocation: Option<AllocationHint>,
    /// Every line of the block, prefix removed.
    lines: Vec<String>,
}

const PREFIX: &str = "=========";

/// Split text output into error blocks. Lines without the `=========` prefix (the worker's
/// own output) and the banner/summary lines are skipped.
pub fn parse_text(out: &str) -> Vec<TextRecord> {
    let mut blocks: Vec<Vec<String>> = Vec::new();
    let mut cur: Option<Vec<String>> = None;
    for raw in out.lines() {
        let Some(rest) = raw.trim_end().strip_prefix(PREFIX) else {
            continue;
        };
        if rest.trim().is_empty() {
            if let Some(b) = cur.take() {
                blocks.push(b);
            }
            continue;
        }
        let indent = rest.len() - rest.trim_start().len();
        let line = rest.trim().to_string();
        if indent <= 1 {
            if let Some(b) = cur.take() {
                blocks.push(b);
            }
            if line.starts_with("COMPUTE-SANITIZER")
                || line.starts_with("ERROR SUMMARY")
                || line.starts_with("LEAK SUMMARY")
                || line.starts_with("RACECHECK SUMMARY")
                || line.starts_with("Target application returned")
            {
                continue;
            }
            cur = Some(vec![line]);
        } else if let Some(b) = cur.as_mut() {
            b.push(line);
        }
    }
    if let Some(b) = cur.take() {
        blocks.push(b);
    }
    blocks.into_iter().map(to_text_record).collect()
}

fn to_text_record(lines: Vec<String>) -> TextRecord {
    let header = lines[0].clone();
    let size = header
        .split_once(" of size ")
        .and_then(|(_, r)| r.split_whitespace().next())
        .and_then(parse_num);
    let direction = if header.contains(" read ") || header.ends_with(" read") {
        Some(Direction::Read)
    } else if header.contains(" write ") || header.ends_with(" write") {
        Some(Direction::Write)
    } else {
        None
    };
    let mut rec = TextRecord {
        header,
        size,
        direction,
        kernel: None,
        thread: None,
        block: None,
        address: None,
        allocation: None,
        lines: lines.clone(),
    };
    for l in &lines[1..] {
        if let Some(at) = l.strip_prefix("at ") {
            if rec.kernel.is_none() {
                // `copy_shift+0xe0` or `k(float*)+0x70 in file.cu:12`
                let at = at.split(" in ").next().unwrap_or(at);
                let k = match at.rfind("+0x") {
                    Some(i) => &at[..i],
                    None => at,
                };
                rec.kernel = Some(k.trim().to_string());
            }
        } else if let Some(by) = l.strip_prefix("by thread ") {
            // `(999,0,0) in block (0,0,0)`
            let mut parts = by.split(" in block ");
            rec.thread = parts.next().and_then(parse_dim3);
            rec.block = parts.next().and_then(parse_dim3);
        } else if let Some(a) = l
            .strip_prefix("Address ")
            .or_else(|| l.strip_prefix("Access at "))
        {
            rec.address = a.split_whitespace().next().map(str::to_string);
        }
        if rec.allocation.is_none() {
            rec.allocation = parse_allocation_hint(l);
        }
    }
    rec
}

fn parse_dim3(s: &str) -> Option<[u64; 3]> {
    let inner = s.trim().strip_prefix('(')?.split(')').next()?;
    let v: Vec<u64> = inner
        .split(',')
        .map(|x| x.trim().parse().ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

/// `2,097,152` → 2097152.
fn parse_num(s: &str) -> Option<u64> {
    let digits: String = s.chars().filter(|c| *c != ',').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Find "N bytes after|before the nearest allocation at ADDR of size S bytes" in a line.
pub(crate) fn parse_allocation_hint(s: &str) -> Option<AllocationHint> {
    const MID: &str = " the nearest allocation at ";
    let i = s.find(MID)?;
    let head = &s[..i];
    let (after, head) = if let Some(h) = head.strip_suffix(" bytes after") {
        (true, h)
    } else if let Some(h) = head.strip_suffix(" bytes before") {
        (false, h)
    } else if let Some(h) = head.strip_suffix(" byte after") {
        (true, h)
    } else {
        (false, head.strip_suffix(" byte before")?)
    };
    let distance = parse_num(head.rsplit(' ').next()?)?;
    let tail = &s[i + MID.len()..];
    let mut words = tail.split_whitespace();
    let base = words.next()?.to_string();
    if words.next()? != "of" || words.next()? != "size" {
        return None;
    }
    let size = parse_num(words.next()?)?;
    Some(AllocationHint {
        distance,
        after,
        base,
        size,
    })
}

/// Copy allocation hints from text records onto XML records of the same address (and
/// kernel, when both name one). Returns how many records gained a hint.
pub fn enrich_from_text(records: &mut [Record], text: &[TextRecord]) -> usize {
    let mut n = 0;
    for r in records.iter_mut().filter(|r| r.allocation.is_none()) {
        let Some(addr) = r.address.as_deref() else {
            continue;
        };
        let hit = text.iter().find(|t| {
            t.allocation.is_some()
                && t.address.as_deref() == Some(addr)
                && match (&t.kernel, &r.kernel) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
        });
        if let Some(t) = hit {
            r.allocation = t.allocation.clone();
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_hint_after_and_before() {
        let h = parse_allocation_hint(
            "and is 1 bytes after the nearest allocation at 0x7f0000200000 of size 2,097,152 bytes",
        )
        .unwrap();
        assert_eq!(
            h,
            AllocationHint {
                distance: 1,
                after: true,
                base: "0x7f0000200000".into(),
                size: 2_097_152
            }
        );
        assert_eq!(
            h.to_string(),
            "1 bytes after the nearest allocation at 0x7f0000200000 of size 2097152 bytes"
        );
        let h = parse_allocation_hint(
            "and is 848 bytes before the nearest allocation at 0x10 of size 64 bytes",
        )
        .unwrap();
        assert!(!h.after);
        assert_eq!(h.distance, 848);
        assert_eq!(parse_allocation_hint("Address 0x10 is out of bounds"), None);
        assert_eq!(
            parse_allocation_hint("x bytes after the nearest allocation at 0x1 of size 4 bytes"),
            None
        );
    }

    #[test]
    fn dim3_parse() {
        assert_eq!(parse_dim3("(999,0,0)"), Some([999, 0, 0]));
        assert_eq!(parse_dim3("(1,2)"), None);
    }
}
