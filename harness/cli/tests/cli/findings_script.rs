//! `scripts/findings.py`, the table of many runs' findings and the list of what upstream has not
//! yet shown, on records written here: a native failure memcheck names more precisely, a read
//! only memcheck saw, and a failure upstream showed on both sides.

use crate::root;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn record(id: &str, op: &str, dtype: &str, ne: [i64; 4], verdict: &str, detector: &str) -> Value {
    json!({
        "id": id,
        "case": {"op": op, "impl": "ggml:CUDA0", "dtype": dtype, "ne": ne, "params": {}, "seed": 1, "alloc": "exact"},
        "verdict": verdict,
        "detector": detector,
        "detail": "",
    })
}

fn write(path: &Path, rows: &[Value]) {
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// A folder for one run of the script, and its input and output files in it: native results,
/// memcheck results, confirm rows, the not-shown list.
struct Files {
    _dir: tempfile::TempDir,
    native: PathBuf,
    memcheck: PathBuf,
    confirm: PathBuf,
    list: PathBuf,
}

fn files() -> Files {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name);
    Files {
        native: at("native.jsonl"),
        memcheck: at("memcheck.jsonl"),
        confirm: at("confirm.jsonl"),
        list: at("not-shown.jsonl"),
        _dir: dir,
    }
}

/// `scripts/findings.py` on the files given; its table (the command must succeed).
fn findings(native: &Path, memcheck: &Path, confirm: &Path, not_shown: Option<&Path>) -> String {
    let mut cmd = Command::new("python3");
    cmd.arg(root().join("scripts/findings.py"))
        .arg("--results")
        .arg(native)
        .arg("--memcheck")
        .arg(memcheck)
        .arg("--confirm")
        .arg(confirm);
    if let Some(list) = not_shown {
        cmd.arg("--not-shown").arg(list);
    }
    let out = cmd.output().expect("run python3 scripts/findings.py");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    table
}

/// The table's row of `op` whose verdict column holds `verdict`, split into its columns: op,
/// dtype, verdict (detector), cases, smallest failing, nearest passing, memcheck alone,
/// upstream (1-based after the leading empty field).
fn row(table: &str, op: &str, verdict: &str) -> Vec<String> {
    table
        .lines()
        .find(|l| l.starts_with(&format!("| {op} |")) && l.contains(verdict))
        .unwrap_or_else(|| panic!("no {op} {verdict} row in\n{table}"))
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn the_table_says_what_memcheck_alone_saw_and_the_list_keeps_memcheck_records_once() {
    // The folder lives as long as `f`: destructuring it would drop the folder at once.
    let f = files();
    let (native, memcheck, confirm, list) = (&f.native, &f.memcheck, &f.confirm, &f.list);
    write(
        native,
        &[
            record("a0", "rope", "f32", [64, 2, 99, 1], "pass", "none"),
            record(
                "a1",
                "rope",
                "f32",
                [64, 2, 100, 1],
                "device-fault",
                "device-sync",
            ),
            record("b0", "col2im_1d", "bf16", [4, 3, 9, 1], "pass", "none"),
            record("b1", "col2im_1d", "bf16", [4, 3, 10, 1], "pass", "none"),
            record("c0", "abs", "f32", [64, 4, 1, 1], "pass", "none"),
            record("c1", "abs", "f32", [64, 8, 1, 1], "launch-error", "driver"),
        ],
    );
    write(
        memcheck,
        &[
            record(
                "a1",
                "rope",
                "f32",
                [64, 2, 100, 1],
                "oob-write",
                "memcheck",
            ),
            record(
                "b1",
                "col2im_1d",
                "bf16",
                [4, 3, 10, 1],
                "oob-read",
                "memcheck",
            ),
        ],
    );
    write(
        confirm,
        &[
            json!({"id": "c1", "side": "fail", "upstream": "FAIL rc=-6 CUDA error: invalid argument"}),
            json!({"id": "c0", "side": "pass", "upstream": "PASS"}),
        ],
    );
    let table = findings(native, memcheck, confirm, Some(list));

    assert!(table.starts_with("4 findings"), "{table}");
    assert!(
        table.contains(
            "shown upstream on both sides (the failing side fails, the passing side passes): 1"
        ),
        "{table}"
    );
    let row = |op: &str, verdict: &str| row(&table, op, verdict);
    assert_eq!(row("col2im_1d", "oob-read")[7], "yes");
    assert_eq!(row("rope", "oob-write")[7], "no (native: device-fault)");
    assert_eq!(row("rope", "device-fault")[7], "");
    assert_eq!(row("rope", "oob-write")[6], "`[64,2,99,1]`");
    assert!(row("abs", "launch-error")[8].starts_with("FAIL / PASS"));

    let listed: Vec<Value> = std::fs::read_to_string(list)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = listed.iter().map(|r| r["id"].as_str().unwrap()).collect();
    // Smallest first: col2im_1d's memcheck record, not its native pass; the rope case once for
    // each group it fails in, its memcheck record first (runs under memcheck show only the
    // memcheck group); abs not at all (shown); then the passing records that pair them.
    assert_eq!(ids, ["b1", "a1", "a1", "a0", "b0"], "{listed:?}");
    assert_eq!(listed[0]["verdict"], "oob-read");
    assert_eq!(listed[1]["detector"], "memcheck");
    assert_eq!(listed[2]["detector"], "device-sync");
}

/// A memcheck group is shown by upstream's runs under memcheck: memcheck's error count is the
/// word on each side, the passing side is the one the confirm run paired with the failure, and
/// the same case's native group is not credited with them.
#[test]
fn runs_under_memcheck_show_a_memcheck_group_and_only_it() {
    let f = files();
    let (native, memcheck, confirm) = (&f.native, &f.memcheck, &f.confirm);
    write(
        native,
        &[
            record("m0", "col2im_1d", "f16", [4, 3, 9, 1], "pass", "none"),
            record(
                "m1",
                "col2im_1d",
                "f16",
                [4, 3, 10, 1],
                "device-fault",
                "device-sync",
            ),
        ],
    );
    write(
        memcheck,
        &[
            record(
                "m1",
                "col2im_1d",
                "f16",
                [4, 3, 10, 1],
                "oob-read",
                "memcheck",
            ),
            record("m2", "col2im_1d", "f16", [4, 3, 5, 1], "pass", "none"),
        ],
    );
    let mut fail = record(
        "m1",
        "col2im_1d",
        "f16",
        [4, 3, 10, 1],
        "oob-read",
        "memcheck",
    );
    fail["side"] = json!("fail");
    fail["memcheck"] = json!(true);
    fail["upstream"] = json!("did not finish under memcheck, memcheck: 3 errors (Invalid __global__ read of size 2 bytes)");
    fail["c_repro"] =
        json!("C repro under memcheck rc=1 FAIL: ggml aborted on CUDA0; memcheck: 3 errors");
    let mut pass = record("m0", "col2im_1d", "f16", [4, 3, 9, 1], "pass", "none");
    pass["side"] = json!("pass");
    pass["memcheck"] = json!(true);
    pass["pair"] = json!("m1");
    pass["upstream"] = json!("ran under memcheck, memcheck: 0 errors");
    write(confirm, &[fail, pass]);
    let table = findings(native, memcheck, confirm, None);
    let row = |verdict: &str| row(&table, "col2im_1d", verdict);
    let mc = row("oob-read");
    assert!(mc[8].starts_with("FAIL / PASS"), "{table}");
    // The passing side upstream ran (m0), not the smaller pass memcheck had (m2).
    assert_eq!(mc[6], "`[4,3,9,1]`");
    assert_eq!(row("device-fault")[8], "not run", "{table}");
    assert!(
        table.contains(
            "shown upstream on both sides (the failing side fails, the passing side passes): 1"
        ),
        "{table}"
    );
}
