//! The `DT_NEEDED` entries of a shared library, read from its ELF section headers.
//!
//! A linked ggml build's `libggml.so` names its backends by soname (`libggml-cpu.so.0`,
//! `libggml-cuda.so.0`). Loading those from the build directory before `libggml.so` lets the
//! dynamic linker match them by soname, so the build loads without `LD_LIBRARY_PATH` and
//! without relying on the RUNPATH the build happened to get. Reading the list from the file,
//! rather than loading every `libggml-*.so` found, keeps a `GGML_BACKEND_DL` build's modules
//! (some of which may not run on this CPU) out of the process until ggml's own loader has scored
//! them.
//!
//! Only 64-bit little-endian ELF is read; anything else gives `None` and the loader falls back
//! to the library's own search path.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

const SHT_DYNAMIC: u32 = 6;
const DT_NULL: i64 = 0;
const DT_NEEDED: i64 = 1;

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

fn read_at(f: &mut File, offset: u64, len: u64) -> Option<Vec<u8>> {
    // Section sizes come from the file: refuse absurd ones rather than allocate them.
    if len > 64 << 20 {
        return None;
    }
    f.seek(SeekFrom::Start(offset)).ok()?;
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    f.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// The sonames `path` needs, in the order the file lists them; `None` if it cannot be read as
/// a 64-bit little-endian ELF file with a dynamic section.
pub(crate) fn needed(path: &Path) -> Option<Vec<String>> {
    let mut f = File::open(path).ok()?;
    let header = read_at(&mut f, 0, 64)?;
    if header.get(0..4)? != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let shoff = u64_at(&header, 0x28)?;
    let shentsize = u64::from(u16_at(&header, 0x3a)?);
    let shnum = u64::from(u16_at(&header, 0x3c)?);
    if shentsize < 64 || shnum == 0 {
        return None;
    }
    let sections = read_at(&mut f, shoff, shentsize.checked_mul(shnum)?)?;
    let section = |i: u64| -> Option<(u32, u64, u64, u32)> {
        let o = usize::try_from(i.checked_mul(shentsize)?).ok()?;
        Some((
            u32_at(&sections, o + 4)?,
            u64_at(&sections, o + 24)?,
            u64_at(&sections, o + 32)?,
            u32_at(&sections, o + 40)?,
        ))
    };
    let (dyn_off, dyn_size, strtab_index) = (0..shnum).find_map(|i| {
        let (ty, off, size, link) = section(i)?;
        (ty == SHT_DYNAMIC).then_some((off, size, link))
    })?;
    let (_, str_off, str_size, _) = section(u64::from(strtab_index))?;
    let dynamic = read_at(&mut f, dyn_off, dyn_size)?;
    let strtab = read_at(&mut f, str_off, str_size)?;
    let mut out = Vec::new();
    for entry in dynamic.chunks_exact(16) {
        let tag = i64::from_le_bytes(entry[0..8].try_into().ok()?);
        let val = usize::try_from(u64::from_le_bytes(entry[8..16].try_into().ok()?)).ok()?;
        match tag {
            DT_NULL => break,
            DT_NEEDED => {
                let rest = strtab.get(val..)?;
                let end = rest.iter().position(|&b| b == 0)?;
                out.push(String::from_utf8_lossy(&rest[..end]).into_owned());
            }
            _ => {}
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_needed_list_of_this_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let needed = needed(&exe).expect("the test binary is a dynamically linked ELF file");
        assert!(
            needed.iter().any(|n| n.starts_with("libc.so")),
            "{needed:?}"
        );
    }

    #[test]
    fn not_elf_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.so");
        std::fs::write(
            &p,
            b"not an elf file at all, but long enough to have a header of 64 bytes....",
        )
        .unwrap();
        assert_eq!(needed(&p), None);
        assert_eq!(needed(&dir.path().join("missing.so")), None);
    }
}
