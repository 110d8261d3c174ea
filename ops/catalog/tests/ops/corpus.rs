//! The incident corpus (corpora/incidents.jsonl): every case of an op this build has
//! validates, and is stored validated (every parameter named), so its id is stable.

use kedge_core::model::case::parse_corpus;

#[test]
fn incident_cases_of_known_ops_are_stored_validated() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../corpora/incidents.jsonl");
    let text = std::fs::read_to_string(path).expect("corpora/incidents.jsonl");
    let reg = kedge_ops::registry();
    let mut checked = 0;
    for (line, c) in parse_corpus(&text).expect("corpus parses") {
        if reg.op(&c.op).is_err() {
            continue;
        }
        let v = reg
            .validate(&c)
            .unwrap_or_else(|e| panic!("line {line}: {e}"));
        assert_eq!(v, c, "line {line}: the stored case names every parameter");
        checked += 1;
    }
    assert!(checked > 0, "no incident of a known op");
}
