//! Hostile cubins and the recordings that carry them: ELF files built with `object`, DWARF 2 line programs
//! written by hand (NVIDIA's inlining opcodes included), and `.cutr` files whose PC samples name them. Each class
//! is the smallest file that reaches one cost or one confusion of the source map: thousands of line sequences
//! relocated against thousands of functions, inline chains thousands of levels deep, a `.debug_line` section header
//! pointing outside the cubin, cubins claiming more than a reader inflates, two cubins under one CRC.

use std::path::Path;

use cutr_format::container::{CHUNK_HEADER_LEN, ChunkType};
use cutr_format::{CubinBlob, PcRecord, PcSamples, Writer, WriterOptions};
use object::write::{Object, Relocation, StandardSection, Symbol, SymbolSection};
use object::{Architecture, BinaryFormat, Endianness, RelocationFlags, SymbolFlags, SymbolKind, SymbolScope};

/// The stall reason every forged sample is counted under (CUPTI's name; `source` reports `long_scoreboard`).
pub const STALL_REASON: &str = "smsp__pcsamp_warps_issue_stalled_long_scoreboard";

/// A function of a forged cubin: its mangled name and its size in bytes of SASS (no SASS is written: the source
/// map reads sizes from the symbols).
#[derive(Clone, Debug)]
pub struct Function {
    pub name: String,
    pub size: u64,
}

/// One DWARF 2 line program unit, written instruction by instruction. `set_address` records which function the
/// address names: the cubin gets a relocation there against that function's symbol.
#[derive(Clone, Debug, Default)]
pub struct LineUnit {
    files: Vec<String>,
    body: Vec<u8>,
    /// `(offset in body, function index)` of each address to relocate.
    relocations: Vec<(usize, usize)>,
}

impl LineUnit {
    /// A unit whose file table holds `files` (numbered from 1, all in directory 1, `/src`).
    pub fn new(files: &[&str]) -> LineUnit {
        LineUnit { files: files.iter().map(|f| f.to_string()).collect(), ..Default::default() }
    }

    /// `DW_LNE_set_address` of `function`'s start: a new sequence.
    pub fn set_address(&mut self, function: usize) -> &mut Self {
        self.body.extend([0, 9, 2]);
        self.relocations.push((self.body.len(), function));
        self.body.extend([0; 8]);
        self
    }

    pub fn advance_pc(&mut self, bytes: u64) -> &mut Self {
        self.body.push(2);
        uleb(&mut self.body, bytes);
        self
    }

    pub fn advance_line(&mut self, by: i64) -> &mut Self {
        self.body.push(3);
        sleb(&mut self.body, by);
        self
    }

    /// `DW_LNS_copy`: a row at the current address and line.
    pub fn copy(&mut self) -> &mut Self {
        self.body.push(1);
        self
    }

    /// NVIDIA's `0x90`: the rows that follow were inlined at row number `context` of this sequence, from the
    /// function named at `name` in `.debug_str`.
    pub fn inlined_call(&mut self, context: u64, name: u64) -> &mut Self {
        let mut args = vec![0x90];
        uleb(&mut args, context);
        uleb(&mut args, name);
        self.body.push(0);
        uleb(&mut self.body, args.len() as u64);
        self.body.extend(args);
        self
    }

    pub fn end_sequence(&mut self) -> &mut Self {
        self.body.extend([0, 1, 1]);
        self
    }
}

/// The `.debug_line` section of `units` and its relocations: `(offset in the section, function index)`.
pub fn line_section(units: &[LineUnit]) -> (Vec<u8>, Vec<(u64, usize)>) {
    let mut out = Vec::new();
    let mut relocations = Vec::new();
    for u in units {
        let mut header = vec![1, 1, (-5i8) as u8, 14, 10, 0, 1, 1, 1, 1, 0, 0, 0, 1];
        header.extend(b"/src\0\0");
        for f in &u.files {
            header.extend(f.as_bytes());
            header.extend([0, 1, 0, 0]);
        }
        header.push(0);
        // NVIDIA's 4-byte `.debug_str` base for inline names, at the end of the header.
        header.extend(0u32.to_le_bytes());
        let unit_length = 2 + 4 + header.len() + u.body.len();
        let start = out.len();
        out.extend((unit_length as u32).to_le_bytes());
        out.extend(2u16.to_le_bytes());
        out.extend((header.len() as u32).to_le_bytes());
        out.extend(&header);
        let body_at = out.len();
        out.extend(&u.body);
        relocations.extend(u.relocations.iter().map(|&(at, f)| ((body_at + at) as u64, f)));
        debug_assert_eq!(out.len() - start, 4 + unit_length);
    }
    (out, relocations)
}

/// A `.debug_line` section's bytes and its relocations: `(offset in the section, function index)`.
pub type LineSection<'a> = (&'a [u8], &'a [(u64, usize)]);

/// An ELF cubin with these functions (global FUNC symbols over one `.text`), and, when given, a `.debug_line` with
/// its relocations (each against the function of that index) and a `.debug_str`.
pub fn elf(functions: &[Function], debug_line: Option<LineSection<'_>>, debug_str: &[u8]) -> Vec<u8> {
    let mut obj = Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    let text = obj.section_id(StandardSection::Text);
    obj.append_section_data(text, &[0; 16], 16);
    let symbols: Vec<_> = functions
        .iter()
        .map(|f| {
            obj.add_symbol(Symbol {
                name: f.name.clone().into_bytes(),
                value: 0,
                size: f.size,
                kind: SymbolKind::Text,
                scope: SymbolScope::Linkage,
                weak: false,
                section: SymbolSection::Section(text),
                flags: SymbolFlags::None,
            })
        })
        .collect();
    if let Some((bytes, relocations)) = debug_line {
        let section = obj.add_section(Vec::new(), b".debug_line".to_vec(), object::SectionKind::Debug);
        obj.append_section_data(section, bytes, 1);
        for &(offset, f) in relocations {
            let r = Relocation {
                offset,
                symbol: symbols[f],
                addend: 0,
                flags: RelocationFlags::Elf { r_type: object::elf::R_X86_64_64 },
            };
            obj.add_relocation(section, r).expect("a relocation against a defined symbol");
        }
    }
    if !debug_str.is_empty() {
        let section = obj.add_section(Vec::new(), b".debug_str".to_vec(), object::SectionKind::Debug);
        obj.append_section_data(section, debug_str, 1);
    }
    obj.write().expect("an ELF file")
}

/// `n` functions `f0`..: each its own line sequence of one row (line = its number + 1) in `k.cu`, the
/// `.debug_line` relocation of each against its function. The relocation class: matching each relocation to its
/// function by a scan costs n^2.
pub fn many_relocations(n: usize) -> Vec<u8> {
    let functions: Vec<Function> = (0..n).map(|i| Function { name: format!("f{i}"), size: 32 }).collect();
    let mut unit = LineUnit::new(&["k.cu"]);
    for i in 0..n {
        unit.set_address(i).advance_line(i as i64).copy().advance_pc(32).end_sequence();
    }
    let (line, relocations) = line_section(&[unit]);
    elf(&functions, Some((&line, &relocations)), b"")
}

/// The inline name `deep_inline` gives every level.
pub const INLINED_NAME: &str = "_Z6helperv";

/// One function `deep` of `depth + 1` instructions (16 bytes each): the row of instruction k (k >= 1, line k + 1)
/// is inlined at the row of instruction k - 1, so the chain at instruction k is k levels deep. The inline class:
/// walking each chain by searching the rows costs depth^2 per PC.
pub fn deep_inline(depth: usize) -> Vec<u8> {
    let functions = [Function { name: "deep".into(), size: 16 * (depth as u64 + 1) }];
    let mut unit = LineUnit::new(&["deep.cu"]);
    unit.set_address(0).copy();
    for k in 1..=depth as u64 {
        unit.inlined_call(k, 0).advance_pc(16).advance_line(1).copy();
    }
    unit.advance_pc(16).end_sequence();
    let (line, relocations) = line_section(&[unit]);
    let debug_str = format!("{INLINED_NAME}\0");
    elf(&functions, Some((&line, &relocations)), debug_str.as_bytes())
}

/// The undamaged counterpart of [`deep_inline`]: the same function, rows and lines, nothing inlined.
pub fn flat_lines(depth: usize) -> Vec<u8> {
    let functions = [Function { name: "deep".into(), size: 16 * (depth as u64 + 1) }];
    let mut unit = LineUnit::new(&["deep.cu"]);
    unit.set_address(0).copy();
    for _ in 1..=depth {
        unit.advance_pc(16).advance_line(1).copy();
    }
    unit.advance_pc(16).end_sequence();
    let (line, relocations) = line_section(&[unit]);
    elf(&functions, Some((&line, &relocations)), b"")
}

/// `n` functions and no `.debug_line`: built without `-lineinfo`.
pub fn without_lines(n: usize) -> Vec<u8> {
    let functions: Vec<Function> = (0..n).map(|i| Function { name: format!("f{i}"), size: 32 }).collect();
    elf(&functions, None, b"")
}

/// `cubin` (an ELF64 file) with the section header of `section` pointing 4096 bytes past the file's end.
pub fn section_outside(cubin: &[u8], section: &str) -> Vec<u8> {
    let mut out = cubin.to_vec();
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes")) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(cubin, 0x28), u16_at(cubin, 0x3a), u16_at(cubin, 0x3c), u16_at(cubin, 0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let names_at = u64_at(cubin, header(shstrndx) + 0x18);
    for i in 0..shnum {
        let name_at =
            names_at + u32::from_le_bytes(cubin[header(i)..header(i) + 4].try_into().expect("4 bytes")) as usize;
        let name = &cubin[name_at..name_at + cubin[name_at..].iter().position(|&b| b == 0).expect("a name")];
        if name == section.as_bytes() {
            out[header(i) + 0x18..header(i) + 0x20].copy_from_slice(&((cubin.len() + 4096) as u64).to_le_bytes());
            return out;
        }
    }
    panic!("no {section} section");
}

/// A PC sample: the cubin's CRC, the function, the offset and the samples there.
#[derive(Clone, Debug)]
pub struct Sample {
    pub crc: u64,
    pub function: String,
    pub pc: u64,
    pub samples: u32,
}

/// Writes a recording of `cubins` (`(crc, bytes)`, a blob chunk each, in order, one copied at a time) and one
/// collection of PC samples on context 1 of device 0 (CUPTI's totals equal to the samples), with its stall-reason
/// table. Nothing else: `source` reads it; the viewers need a trace (see [`recording_with_trace`]).
pub fn recording(path: &Path, cubins: &[(u64, &[u8])], samples: &[Sample]) {
    let mut w = Writer::create(path, WriterOptions::default()).expect("a new file");
    write_source_chunks(&mut w, cubins, samples).expect("blob and pc_samples chunks");
    w.finish().expect("a closed file");
}

/// [`recording`] after a generated trace of `records` records (metadata, activity, strings), so that the
/// viewers convert it too.
pub fn recording_with_trace(path: &Path, cubins: &[(u64, &[u8])], samples: &[Sample], records: u64) {
    let w = Writer::create(path, WriterOptions::default()).expect("a new file");
    let opts = crate::SynthOptions { records, ..Default::default() };
    crate::write_to_with(w, opts, |w, _| write_source_chunks(w, cubins, samples)).expect("a generated trace");
}

fn write_source_chunks<W: std::io::Write>(
    w: &mut Writer<W>,
    cubins: &[(u64, &[u8])],
    samples: &[Sample],
) -> Result<(), cutr_format::FormatError> {
    for (crc, data) in cubins {
        w.write_cubin(&CubinBlob { crc: *crc, module_id: 1, data: data.to_vec() })?;
    }
    let total: u64 = samples.iter().map(|s| u64::from(s.samples)).sum();
    let pcs = samples
        .iter()
        .map(|s| PcRecord {
            cubin_crc: s.crc,
            pc_offset: s.pc,
            function_index: 0,
            function_name: s.function.clone(),
            stalls: vec![(0, s.samples)],
        })
        .collect();
    let collection = PcSamples {
        context: 1,
        device: 0,
        t_start: 1,
        t_end: 2,
        total_samples: total,
        stall_reasons: vec![(0, STALL_REASON.into())],
        pcs,
        ..Default::default()
    };
    w.write_pc_samples(&collection)?;
    Ok(())
}

/// The file with one bit of the `n`-th blob chunk's header flipped (its stored length's lowest bit): the chunk no
/// longer reads, and the cubin in it is lost.
pub fn flip_blob_header_bit(file: &mut [u8], n: usize) {
    let blob = super::chunks_of(file, ChunkType::Blob)[n];
    // The stored length is the u64 at byte 16 of the header (after magic, type, codec, flags, seq and count).
    let at = blob.offset + 16;
    debug_assert!(at < blob.offset + CHUNK_HEADER_LEN);
    file[at] ^= 1;
}

fn uleb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn sleb(out: &mut Vec<u8>, mut v: i64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        let done = (v == 0 && byte & 0x40 == 0) || (v == -1 && byte & 0x40 != 0);
        out.push(if done { byte } else { byte | 0x80 });
        if done {
            return;
        }
    }
}
