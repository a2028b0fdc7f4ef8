//! Hostile cubins through the source map: each class read in time linear in the cubin, with the figures of the
//! undamaged cubin where some survive, and the exact sentence of what was wrong where none does.

use cutr_source::{LineTables, MAX_INLINE_DEPTH, Position, SourceMap};
use cutr_synth::forge::cubins::{self, Function, INLINED_NAME, LineUnit, elf, line_section};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/cubins").join(name)).unwrap()
}

fn at(file: &str, line: u32) -> Position {
    Position { dir: "/src".into(), file: file.into(), line }
}

/// 20,000 functions, each its own sequence relocated against it: every function finds its own rows (a scan per
/// relocation took 2 x 10^8 steps here, and grows with the square).
#[test]
fn every_sequence_reaches_its_function_among_thousands() {
    let m = SourceMap::from_cubin(&cubins::many_relocations(20_000)).unwrap();
    assert_eq!(m.functions().len(), 20_000);
    assert_eq!(m.line_tables(), LineTables::Present);
    assert_eq!(m.problems(), [] as [String; 0]);
    for i in [0usize, 1, 9_999, 19_999] {
        let l = m.locate(&format!("f{i}"), 16).unwrap();
        assert_eq!((l.position, l.inlined_at.len()), (at("k.cu", i as u32 + 1), 0));
    }
    assert_eq!(m.locate("f0", 32), None, "past the function's end");
    // Only the functions asked for are kept; the line tables are judged on all of them.
    let some = SourceMap::from_cubin_for(&cubins::many_relocations(20_000), &|n| n == "f7").unwrap();
    assert_eq!(some.functions().len(), 1);
    assert_eq!(some.locate("f7", 0).unwrap().position, at("k.cu", 8));
    assert_eq!(some.locate("f8", 0), None);
    assert_eq!(some.line_tables(), LineTables::Present);
}

/// A chain 1,000 levels deep: each PC's chain is cut at 64 levels, the cut said once (937 rows: levels 65 to 1,000
/// and the sequence's end row, which keeps the last context); shallower chains are whole.
#[test]
fn inline_chains_are_walked_by_link_and_cut_at_their_depth_limit() {
    let m = SourceMap::from_cubin(&cubins::deep_inline(1_000)).unwrap();
    assert_eq!(MAX_INLINE_DEPTH, 64);
    assert_eq!(m.problems(), ["937 rows are inlined more than 64 levels deep: their chains are cut at 64"]);
    assert_eq!(m.line_tables(), LineTables::Present);
    let deepest = m.locate("deep", 16 * 1_000).unwrap();
    assert_eq!(deepest.position, at("deep.cu", 1_001));
    assert_eq!(deepest.inlined_at.len(), 64);
    assert_eq!(deepest.inlined_at[0], (INLINED_NAME.to_string(), at("deep.cu", 1_000)));
    assert_eq!(deepest.inlined_at[63], (INLINED_NAME.to_string(), at("deep.cu", 937)));
    let ten = m.locate("deep", 16 * 10).unwrap();
    assert_eq!((ten.position.line, ten.inlined_at.len()), (11, 10));
    assert_eq!(ten.inlined_at.last().unwrap().1, at("deep.cu", 1));
    assert_eq!(m.locate("deep", 0).unwrap().inlined_at, []);
}

/// One flipped field in the ELF: `.debug_line`'s section header points past the end. Damaged, said with the
/// bytes, never read as "no line tables"; the functions are still there.
#[test]
fn a_debug_line_header_outside_the_cubin_is_damage_not_absence() {
    let good = fixture("source_workload.sm_90.cubin");
    let m = SourceMap::from_cubin(&cubins::section_outside(&good, ".debug_line")).unwrap();
    assert_eq!(m.line_tables(), LineTables::Damaged);
    assert_eq!(m.problems(), ["the .debug_line section header points outside the cubin (bytes 16544..16824 of 12448)"]);
    assert_eq!(m.functions().len(), 2);
    assert_eq!(m.locate("_Z5chasePKjjiPj", 0x330), None);
    assert!(!m.has_lines());
    // Built without -lineinfo: absent, nothing wrong.
    let none = SourceMap::from_cubin(&cubins::without_lines(3)).unwrap();
    assert_eq!((none.line_tables(), none.problems().len(), none.functions().len()), (LineTables::Absent, 0, 3));
}

/// Two units, the second's length pointing outside the section: the first unit's rows are kept, the rest said.
/// Only the damaged unit: no row, damaged.
#[test]
fn a_unit_that_runs_past_the_section_keeps_the_units_before_it() {
    let functions: Vec<Function> = (0..2).map(|i| Function { name: format!("f{i}"), size: 32 }).collect();
    let mut units = vec![LineUnit::new(&["a.cu"]), LineUnit::new(&["b.cu"])];
    units[0].set_address(0).advance_line(9).copy().advance_pc(32).end_sequence();
    units[1].set_address(1).advance_line(19).copy().advance_pc(32).end_sequence();
    let (mut line, relocations) = line_section(&units);
    let second = u32::from_le_bytes(line[..4].try_into().unwrap()) as usize + 4;
    line[second..second + 4].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
    let m = SourceMap::from_cubin(&elf(&functions, Some((&line, &relocations)), b"")).unwrap();
    assert_eq!(m.line_tables(), LineTables::Present);
    assert_eq!(m.locate("f0", 0).unwrap().position, at("a.cu", 10));
    assert_eq!(m.locate("f1", 0), None);
    assert_eq!(
        m.problems(),
        [format!(
            "the line table is damaged at byte {second} of .debug_line (unexpected end of input): the 1 units before it are read, the rest left out"
        )]
    );
    line[..4].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
    let m = SourceMap::from_cubin(&elf(&functions, Some((&line, &relocations)), b"")).unwrap();
    assert_eq!(m.line_tables(), LineTables::Damaged);
}

/// Sequences with no relocation name no function: damaged, said, not "no line tables".
#[test]
fn sequences_without_relocations_are_said() {
    let functions = [Function { name: "f0".into(), size: 32 }];
    let mut unit = LineUnit::new(&["a.cu"]);
    unit.set_address(0).copy().advance_pc(32).end_sequence();
    let (line, _) = line_section(&[unit]);
    let m = SourceMap::from_cubin(&elf(&functions, Some((&line, &[])), b"")).unwrap();
    assert_eq!(m.line_tables(), LineTables::Damaged);
    assert_eq!(
        m.problems(),
        ["1 line sequences name no function of the cubin (no relocation ties their address to one): their rows are \
          left out"]
    );
}

/// 200,000 one-byte rows at one address: more than a cubin of its size can describe. Refused whole (never kept at
/// 40 bytes a row), said with the figures.
#[test]
fn more_rows_than_the_cubin_can_describe_are_refused() {
    let functions = [Function { name: "f0".into(), size: 32 }];
    let mut unit = LineUnit::new(&["a.cu"]);
    unit.set_address(0);
    for _ in 0..200_000 {
        unit.copy();
    }
    unit.end_sequence();
    let (line, relocations) = line_section(&[unit]);
    let cubin = elf(&functions, Some((&line, &relocations)), b"");
    let m = SourceMap::from_cubin(&cubin).unwrap();
    assert_eq!(m.line_tables(), LineTables::Damaged);
    let most = cubin.len() / 4 + 4096;
    assert_eq!(
        m.problems(),
        [format!(
            "its line tables hold more than {most} rows, more than a {}-byte cubin can describe: none is used",
            cubin.len()
        )]
    );
    assert_eq!(m.locate("f0", 0), None);
}

/// 1,000 inline names at successive offsets of one 200,000-byte string: the first is read, the rest would copy
/// the string 999 more times and are left unnamed.
#[test]
fn overlapping_inline_names_cannot_multiply_debug_str() {
    let functions = [Function { name: "f0".into(), size: 16 * 1_001 }];
    let mut unit = LineUnit::new(&["a.cu"]);
    unit.set_address(0).copy();
    for k in 1..=1_000u64 {
        unit.inlined_call(k, k - 1).advance_pc(16).copy();
    }
    unit.end_sequence();
    let (line, relocations) = line_section(&[unit]);
    let mut debug_str = vec![b'a'; 200_000];
    debug_str.push(0);
    let m = SourceMap::from_cubin(&elf(&functions, Some((&line, &relocations)), &debug_str)).unwrap();
    assert_eq!(
        m.problems(),
        [
            "999 inline function names overlap beyond the size of .debug_str: left unnamed",
            "937 rows are inlined more than 64 levels deep: their chains are cut at 64"
        ]
    );
    let l = m.locate("f0", 16).unwrap();
    assert_eq!(l.inlined_at[0].0.len(), 200_000);
    assert_eq!(m.locate("f0", 32).unwrap().inlined_at[0].0, "");
}

/// Line keys: PCs on one row, or on rows of one line and one chain, share a key; another line or another chain
/// does not.
#[test]
fn line_keys_group_pcs_as_their_locations_do() {
    let functions = [Function { name: "f".into(), size: 64 }];
    let mut unit = LineUnit::new(&["a.cu"]);
    unit.set_address(0).advance_line(4).copy().advance_pc(16).advance_line(1).copy();
    unit.advance_pc(16).advance_line(-1).copy().advance_pc(32).end_sequence();
    let (line, relocations) = line_section(&[unit]);
    let m = SourceMap::from_cubin(&elf(&functions, Some((&line, &relocations)), b"")).unwrap();
    let key = |pc| m.line_key("f", pc).unwrap();
    assert_eq!(key(0), key(8), "one row");
    assert_eq!(key(0), key(32), "line 5 again");
    assert_ne!(key(0), key(16));
    assert_eq!((key(16).line, m.file_of(key(16))), (6, ("/src", "a.cu")));
    assert_eq!(m.line_key("f", 64), None);
    let deep = SourceMap::from_cubin(&cubins::deep_inline(100)).unwrap();
    let dk = |pc| deep.line_key("deep", pc).unwrap();
    assert_ne!(dk(16 * 10), dk(16 * 11));
    assert_eq!(dk(16 * 10), dk(16 * 10 + 8));
}
