//! The fp8_gemm lines of the incident corpus parse, every case validates, and its numbers are the blog's.

use kedge_core::case::parse_corpus;
use kedge_ops::fp8_gemm::plan_cache::{layouts, Sizing};

#[test]
fn incident_corpus_cases_validate_and_carry_the_incident_numbers() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../corpora/incidents.jsonl");
    let text = std::fs::read_to_string(path).expect("corpora/incidents.jsonl");
    let reg = kedge_ops::registry();
    let cases: Vec<_> = parse_corpus(&text)
        .expect("corpus parses")
        .into_iter()
        .filter(|(_, c)| c.op == "fp8_gemm")
        .collect();
    assert!(cases.len() >= 6);
    let mut short = 0;
    for (line, c) in cases {
        let v = c
            .validate(&reg)
            .unwrap_or_else(|e| panic!("line {line}: {e}"));
        assert_eq!(v, c, "line {line}: the stored case names every parameter");
        assert_eq!(c.ne, [3072, 300, 3072, 1]);
        if c.imp == "bucketed-short" {
            short += 1;
            let l = layouts(Sizing::BucketedShort, 300, 3072, 3072, 512).unwrap()[0];
            assert_eq!(l.bytes_read_past_staging, 651_264);
        }
    }
    assert!(short >= 3);
}
