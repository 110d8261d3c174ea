//! compute-sanitizer `--xml` output → typed `Record`s. A file cut off mid-way (the worker or
//! the sanitizer was killed) is not an error: the complete records before the cut come back
//! with `truncated: true`, so the supervisor can still attribute them.

use super::{text::parse_allocation_hint, ApiError, Direction, Record, RecordKind, SanitizerError};
use quick_xml::errors::{Error as XmlError, IllFormedError, SyntaxError};
use quick_xml::events::Event;
use quick_xml::Reader;
use std::path::Path;

const ROOT: &str = "ComputeSanitizerOutput";

/// One XML file read: its complete records, and whether it was cut off.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedXml {
    /// Complete records, in the order the tool wrote them (chronological).
    pub records: Vec<Record>,
    /// The file ended before `</ComputeSanitizerOutput>`; a record cut in half is dropped.
    pub truncated: bool,
}

/// Read and parse a saved XML file. Bytes that are not UTF-8 (a multi-byte character cut by
/// truncation) are replaced, not fatal.
pub fn parse_xml_file(path: &Path) -> Result<ParsedXml, SanitizerError> {
    let bytes = std::fs::read(path).map_err(|source| SanitizerError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_xml(&String::from_utf8_lossy(&bytes))
}

/// A generic element, so the typed record can be read off by path.
#[derive(Debug, Default)]
struct Node {
    name: String,
    text: String,
    children: Vec<Node>,
    start: usize,
}

impl Node {
    fn child(&self, name: &str) -> Option<&Node> {
        self.children.iter().find(|c| c.name == name)
    }
    fn path(&self, path: &[&str]) -> Option<&Node> {
        let mut n = self;
        for p in path {
            n = n.child(p)?;
        }
        Some(n)
    }
    fn text_at(&self, path: &[&str]) -> Option<String> {
        self.path(path)
            .map(|n| n.text.trim().to_string())
            .filter(|t| !t.is_empty())
    }
    fn leaves(&self, prefix: &str, out: &mut Vec<(String, String)>) {
        for c in &self.children {
            let p = if prefix.is_empty() {
                c.name.clone()
            } else {
                format!("{prefix}/{}", c.name)
            };
            if c.children.is_empty() {
                out.push((p, c.text.trim().to_string()));
            } else {
                c.leaves(&p, out);
            }
        }
    }
}

/// Parse compute-sanitizer XML text.
pub fn parse_xml(input: &str) -> Result<ParsedXml, SanitizerError> {
    let mut reader = Reader::from_str(input);
    // Mismatched end tags are malformed files, not truncation.
    reader.config_mut().check_end_names = true;
    let mut p = XmlParse {
        input,
        records: Vec::new(),
        stack: Vec::new(),
        seen_root: false,
        lines: LineCursor::default(),
    };
    loop {
        let before = reader.buffer_position();
        let ev = match reader.read_event() {
            Ok(ev) => ev,
            Err(e) if is_cut_off(&e) => return Ok(p.done(true)),
            Err(e) => return Err(p.malformed(reader.error_position(), e.to_string())),
        };
        match ev {
            Event::Start(s) => p.start(
                before,
                String::from_utf8_lossy(s.name().as_ref()).into_owned(),
            )?,
            Event::Empty(s) => p.empty(
                before,
                String::from_utf8_lossy(s.name().as_ref()).into_owned(),
            )?,
            Event::End(_) => p.end(before)?,
            Event::Text(t) => {
                let s = t.decode().map_err(|e| p.malformed(before, e.to_string()))?;
                p.text(before, &s)?;
            }
            Event::CData(t) => p.push_text(&String::from_utf8_lossy(&t)),
            Event::GeneralRef(r) => {
                // quick-xml 0.38 reports `&quot;` and `&#65;` as their own events.
                let resolved = if r.is_char_ref() {
                    r.resolve_char_ref()
                        .map_err(|e| p.malformed(before, e.to_string()))?
                        .map(String::from)
                } else {
                    let name = r.decode().map_err(|e| p.malformed(before, e.to_string()))?;
                    quick_xml::escape::resolve_predefined_entity(&name).map(String::from)
                };
                let resolved = resolved
                    .ok_or_else(|| p.malformed(before, "unknown entity reference".to_string()))?;
                p.push_text(&resolved);
            }
            Event::Eof => {
                // Nothing at all, or an open element: the writer was stopped mid-file.
                let cut = !p.stack.is_empty() || !p.seen_root;
                return Ok(p.done(cut));
            }
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
        }
    }
}

/// `parse_xml`'s state: the elements open, the records closed, whether the root was seen.
struct XmlParse<'a> {
    input: &'a str,
    records: Vec<Record>,
    stack: Vec<Node>,
    seen_root: bool,
    /// Where the last record's line was counted to.
    lines: LineCursor,
}

/// The line of a byte offset, counted on from the last offset asked (records come in file
/// order): each record's line costs the bytes since the one before, not the whole file before
/// it. (Counted from the start each time, a flood of 12,661 records, the 4 MiB a case may write
/// before kedge stops it, took tens of seconds to read.)
#[derive(Debug, Default)]
struct LineCursor {
    /// A byte offset already counted, and the newlines before it.
    at: usize,
    newlines: usize,
}

impl LineCursor {
    /// The 1-based line of byte `pos` of `input`.
    fn line(&mut self, input: &str, pos: usize) -> usize {
        let pos = pos.min(input.len());
        if pos < self.at {
            *self = LineCursor::default();
        }
        let bytes = &input.as_bytes()[self.at..pos];
        self.newlines += bytes.iter().filter(|&&b| b == b'\n').count();
        self.at = pos;
        self.newlines + 1
    }
}

impl XmlParse<'_> {
    /// A malformed file, at the line and column of byte `pos`.
    fn malformed(&self, pos: u64, msg: String) -> SanitizerError {
        let (line, column) = line_col(self.input, pos as usize);
        SanitizerError::Malformed { line, column, msg }
    }

    /// The records read, and whether the file was cut off.
    fn done(self, truncated: bool) -> ParsedXml {
        ParsedXml {
            records: self.records,
            truncated,
        }
    }

    /// `<name>` at byte `at`: the root once, then any element inside it.
    fn start(&mut self, at: u64, name: String) -> Result<(), SanitizerError> {
        if self.stack.is_empty() {
            if self.seen_root {
                return Err(self.malformed(at, format!("second root element <{name}>")));
            }
            if name != ROOT {
                return Err(self.malformed(
                    at,
                    format!("expected <{ROOT}> as the root element, found <{name}>"),
                ));
            }
            self.seen_root = true;
        }
        self.stack.push(Node {
            name,
            start: at as usize,
            ..Node::default()
        });
        Ok(())
    }

    /// `<name/>` at byte `at`: an empty root (a clean run), or an empty child.
    fn empty(&mut self, at: u64, name: String) -> Result<(), SanitizerError> {
        if self.stack.is_empty() {
            if name == ROOT && !self.seen_root {
                // `<ComputeSanitizerOutput/>`: a clean run with nothing to report.
                self.seen_root = true;
                return Ok(());
            }
            return Err(self.malformed(
                at,
                format!("expected <{ROOT}> as the root element, found <{name}/>"),
            ));
        }
        if let Some(top) = self.stack.last_mut() {
            top.children.push(Node {
                name,
                start: at as usize,
                ..Node::default()
            });
        }
        Ok(())
    }

    /// An end tag at byte `at`: a record closed under the root becomes a record, any other
    /// element a child of its parent.
    fn end(&mut self, at: u64) -> Result<(), SanitizerError> {
        let node = self
            .stack
            .pop()
            .ok_or_else(|| self.malformed(at, "end tag without a start tag".to_string()))?;
        match self.stack.len() {
            0 => {} // the root closed
            1 if node.name == "record" => {
                let line = self.lines.line(self.input, node.start);
                let r = to_record(&node, line).map_err(|m| self.malformed(node.start as u64, m))?;
                self.records.push(r);
            }
            _ => {
                if let Some(parent) = self.stack.last_mut() {
                    parent.children.push(node);
                }
            }
        }
        Ok(())
    }

    /// Text at byte `at`: an open element's, or whitespace between elements; anything else
    /// outside the root is not compute-sanitizer XML.
    fn text(&mut self, at: u64, s: &str) -> Result<(), SanitizerError> {
        match self.stack.last_mut() {
            Some(top) => top.text.push_str(s),
            None if s.trim().is_empty() => {}
            None => {
                return Err(self.malformed(
                    at,
                    format!(
                        "text outside the <{ROOT}> element: not compute-sanitizer XML ({:?})",
                        s.trim().chars().take(40).collect::<String>()
                    ),
                ))
            }
        }
        Ok(())
    }

    /// Text (CDATA, a resolved reference) for the open element, if any.
    fn push_text(&mut self, s: &str) {
        if let Some(top) = self.stack.last_mut() {
            top.text.push_str(s);
        }
    }
}

/// Errors that only arise because the input ended inside markup.
fn is_cut_off(e: &XmlError) -> bool {
    match e {
        XmlError::Syntax(s) => !matches!(s, SyntaxError::InvalidBangMarkup),
        XmlError::IllFormed(IllFormedError::UnclosedReference)
        | XmlError::IllFormed(IllFormedError::MissingEndTag(_)) => true,
        _ => false,
    }
}

fn line_col(input: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(input.len());
    let before = &input.as_bytes()[..pos];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = pos
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1)
        + 1;
    (line, col)
}

fn dim3(n: &Node, name: &str) -> Result<Option<[u64; 3]>, String> {
    let Some(d) = n.child(name) else {
        return Ok(None);
    };
    let mut out = [0u64; 3];
    for (i, axis) in ["x", "y", "z"].iter().enumerate() {
        if let Some(t) = d.text_at(&[axis]) {
            out[i] = t
                .parse()
                .map_err(|_| format!("<{name}><{axis}> is not a number: '{t}'"))?;
        }
    }
    Ok(Some(out))
}

/// The record of a `<record>` element that starts on `line`.
fn to_record(n: &Node, line: usize) -> Result<Record, String> {
    let kind = RecordKind::parse(&n.text_at(&["kind"]).unwrap_or_default());
    // An `Imprecise` record has no sentence, only the hardware exception the GPU raised
    // ("Warp illegal address"): that is what the user needs to read.
    let text = match (
        n.text_at(&["what", "text"]),
        n.text_at(&["what", "exception"]),
    ) {
        (Some(t), _) if !t.is_empty() => t,
        (_, Some(e)) => format!("hardware exception: {e} (imprecise: no faulting address)"),
        _ => String::new(),
    };
    let size = match n.text_at(&["what", "size"]) {
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| format!("<size> is not a number: '{s}'"))?,
        ),
        None => None,
    };
    let direction = match n.text_at(&["what", "direction"]).as_deref() {
        Some("read") | Some("Read") => Some(Direction::Read),
        Some("write") | Some("Write") => Some(Direction::Write),
        _ => None,
    };
    let who = n.child("who");
    let (thread, block) = match who {
        Some(w) => (dim3(w, "threadIdx")?, dim3(w, "blockIdx")?),
        None => (None, None),
    };
    let host_frames = n
        .child("hostStack")
        .map(|hs| {
            hs.children
                .iter()
                .filter(|f| f.name == "frame")
                .filter_map(|f| f.text_at(&["func"]))
                .collect()
        })
        .unwrap_or_default();
    // `Api` records name the failing call; any record with an `<api>` field is one too.
    let api_name = n.text_at(&["what", "api"]);
    let api = if kind == RecordKind::Api || api_name.is_some() {
        let result = match n.text_at(&["what", "result"]) {
            Some(r) => Some(
                r.parse::<i64>()
                    .map_err(|_| format!("<result> is not a number: '{r}'"))?,
            ),
            None => None,
        };
        Some(ApiError {
            api: api_name.unwrap_or_default(),
            error: n.text_at(&["what", "error"]).unwrap_or_default(),
            message: n.text_at(&["what", "message"]),
            result,
        })
    } else {
        None
    };
    let mut fields = Vec::new();
    n.leaves("", &mut fields);
    // How far past which allocation: memcheck's text output says it; if any field of the
    // XML record carries the same sentence, use it.
    let allocation = fields.iter().find_map(|(_, v)| parse_allocation_hint(v));
    let error = if api.is_some() {
        None
    } else {
        n.text_at(&["what", "error"])
    };
    Ok(Record {
        kind,
        level: n.text_at(&["level"]),
        text,
        space: n.text_at(&["what", "space"]),
        size,
        direction,
        error,
        address: n
            .text_at(&["what", "address"])
            .or_else(|| n.text_at(&["what", "accessAddress"])),
        kernel: n.text_at(&["where", "func"]),
        pc: n.text_at(&["where", "pc"]),
        thread,
        block,
        host_frames,
        api,
        allocation,
        fields,
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINI: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<ComputeSanitizerOutput>
  <record>
    <kind>Precise</kind>
    <what><text>Invalid __global__ write of size 2 bytes</text><size>2</size>
      <direction>write</direction><error>out of bounds</error><address>0x10</address></what>
    <where><func>k</func></where>
  </record>
</ComputeSanitizerOutput>
"#;

    #[test]
    fn mini_document_parses() {
        let p = parse_xml(MINI).unwrap();
        assert!(!p.truncated);
        assert_eq!(p.records.len(), 1);
        let r = &p.records[0];
        assert_eq!(r.kind, RecordKind::Precise);
        assert_eq!(r.direction, Some(Direction::Write));
        assert_eq!(r.size, Some(2));
        assert_eq!(r.kernel.as_deref(), Some("k"));
        assert_eq!(r.line, 3);
        assert_eq!(r.field("what/address"), Some("0x10"));
    }

    /// Each record's line is where its `<record>` starts, counted on from the record before
    /// (a flood of thousands is read in one pass), whatever lies between them.
    #[test]
    fn every_record_has_the_line_it_starts_on() {
        let record =
            "  <record>\n    <kind>Precise</kind>\n    <what><text>t</text></what>\n  </record>\n";
        let mut doc = String::from("<?xml version=\"1.0\"?>\n<ComputeSanitizerOutput>\n");
        let mut want = Vec::new();
        for k in 0..200 {
            // A blank line now and then between records.
            if k % 7 == 3 {
                doc.push('\n');
            }
            want.push(doc.matches('\n').count() + 1);
            doc.push_str(record);
        }
        doc.push_str("</ComputeSanitizerOutput>\n");
        let p = parse_xml(&doc).unwrap();
        let got: Vec<usize> = p.records.iter().map(|r| r.line).collect();
        assert_eq!(got, want);
        // Cut in the middle of the last record: the others keep their lines.
        let cut = &doc[..doc.len() - 40];
        let p = parse_xml(cut).unwrap();
        assert!(p.truncated);
        let got: Vec<usize> = p.records.iter().map(|r| r.line).collect();
        assert_eq!(got, want[..199]);
    }

    #[test]
    fn empty_root_is_a_clean_run() {
        for doc in [
            "<ComputeSanitizerOutput/>",
            "<?xml version=\"1.0\"?>\n<ComputeSanitizerOutput>\n</ComputeSanitizerOutput>\n",
        ] {
            let p = parse_xml(doc).unwrap();
            assert!(p.records.is_empty() && !p.truncated, "{doc}");
        }
    }

    #[test]
    fn empty_file_is_truncated_not_malformed() {
        let p = parse_xml("").unwrap();
        assert!(p.truncated && p.records.is_empty());
    }

    #[test]
    fn mismatched_tags_are_malformed_with_position() {
        let doc = "<ComputeSanitizerOutput>\n  <record>\n    <kind>Api</wrong>\n";
        match parse_xml(doc) {
            Err(SanitizerError::Malformed { line, column, msg }) => {
                assert_eq!(line, 3, "{msg}");
                assert!(column > 1, "{column}");
                assert!(msg.contains("wrong"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wrong_root_and_plain_text_are_malformed() {
        let e = parse_xml("<html><body/></html>").unwrap_err().to_string();
        assert!(
            e.contains("ComputeSanitizerOutput") && e.contains("html"),
            "{e}"
        );
        let e = parse_xml("========= ERROR SUMMARY: 0 errors\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1"), "{e}");
        let e = parse_xml("<ComputeSanitizerOutput></ComputeSanitizerOutput><x/>")
            .unwrap_err()
            .to_string();
        assert!(e.contains("root"), "{e}");
    }

    #[test]
    fn bad_number_is_malformed_at_the_record() {
        let doc = "<ComputeSanitizerOutput>\n<record><kind>Precise</kind><what><size>four</size></what></record>\n</ComputeSanitizerOutput>";
        match parse_xml(doc) {
            Err(SanitizerError::Malformed { line, msg, .. }) => {
                assert_eq!(line, 2);
                assert!(msg.contains("four"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_cut_of_the_mini_document_is_handled() {
        for cut in 0..MINI.len() {
            let p = parse_xml(&MINI[..cut]).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
            let closed = MINI[..cut].contains("</ComputeSanitizerOutput>");
            assert_eq!(p.truncated, !closed, "cut {cut}");
            let want = usize::from(MINI[..cut].contains("</record>"));
            assert_eq!(p.records.len(), want, "cut {cut}");
        }
    }
}
