//! `kedge sweep --devices` on the command line (no GPU needed): a list of ordinals parses,
//! anything else exits 2 saying what is wrong, and it cannot be mixed with `--device`.

fn kedge(args: &[&str]) -> (i32, String) {
    let (rc, _, err) = crate::kedge(args);
    (rc, err)
}

#[rstest::rstest]
#[case("a,b", "'a' is not a GPU ordinal")]
#[case("0,x", "'x' is not a GPU ordinal")]
#[case("", "no GPU given")]
#[case("0,,1", "'' is not a GPU ordinal")]
#[case("1,1", "GPU 1 is listed twice")]
fn bad_device_lists_exit_2_and_say_why(#[case] list: &str, #[case] says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let (rc, err) = kedge(&["sweep", "--cpu", "--out", out, "--devices", list]);
    assert_eq!(rc, 2, "--devices {list:?}: {err}");
    assert!(err.contains(says), "--devices {list:?}: {err}");
}

#[test]
fn devices_and_device_do_not_mix() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let (rc, err) = kedge(&[
        "sweep",
        "--cpu",
        "--out",
        out,
        "--devices",
        "0",
        "--device",
        "1",
    ]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn a_good_list_parses() {
    // Without a GPU the sweep runs the CPU-side checks (exit 4); those results name no GPU.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let args = [
        "sweep", "smoke", "-o", "rms_norm", "--impl", "clamped", "--cpu",
    ];
    let (rc, err) = kedge(&[&args[..], &["--out", out, "--devices", "0,1"]].concat());
    assert_eq!(rc, 4, "{err}");
    let results = std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap();
    assert!(
        !results.is_empty() && !results.contains("\"gpu\""),
        "{results}"
    );
}
