//! Source level from a cubin alone: which CUDA source line a SASS instruction came from.
//!
//! A cubin built with `-lineinfo` (or `-G`) carries a DWARF 2 line table in `.debug_line` with one sequence per
//! kernel or device function: rows of (SASS offset in the function, file, line), where every function's code
//! starts at offset 0 in its own `.text.<name>` section, so a sequence is tied to its function by the relocation
//! against its `DW_LNE_set_address`, not by address. NVIDIA adds two extended opcodes for inlining: `0x90`
//! (inlined call: the row of the call site, and the inlined function's name) and `0x91` (function name). This crate
//! reads both with `object` and `gimli` and answers what `cuptiGetSassToSourceCorrelation` answers, plus the chain
//! of call sites an inlined instruction came through, with no CUDA library.

mod cubin;
mod functions;
pub mod host;
mod inline;
mod lines;

use std::collections::HashMap;

use serde::Serialize;

pub use cubin::Function;
pub use functions::{CallSite, CodeFunction, FunctionKind, INSTRUCTION_BYTES, call_target};
pub use inline::MAX_INLINE_DEPTH;

/// Why a cubin's source map could not be read at all (damaged line tables are not an error: they are read as far
/// as they go, and [`SourceMap::problems`] says what was wrong).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("not an ELF cubin: {0}")]
    NotElf(String),
}

/// What a cubin says about lines: the three answers a user acts on differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LineTables {
    /// Line rows were read (some parts may still have been damaged: [`SourceMap::problems`]).
    Present,
    /// No `.debug_line`: built without `-lineinfo` (or `-G`).
    Absent,
    /// A `.debug_line` (or what it needs) is there but no row could be read from it.
    Damaged,
}

/// A source position.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Position {
    /// The directory as the compiler recorded it (absolute on the build machine), empty when none.
    pub dir: String,
    pub file: String,
    pub line: u32,
}

/// Where an instruction came from: its innermost position (inside an inlined function, where it was inlined) and
/// the call sites it was inlined through, innermost first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Location {
    pub position: Position,
    /// `(function inlined, call site)`, from the innermost call outwards; at most [`MAX_INLINE_DEPTH`].
    pub inlined_at: Vec<(String, Position)>,
}

/// A source line as samples are grouped by: its file, its line and the call sites it was inlined through, as a few
/// integers, so that grouping many PCs costs no text per PC ([`SourceMap::locate`] gives the text of the lines
/// shown). Two keys of one map are equal when their locations are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LineKey {
    file: u32,
    pub line: u32,
    /// A hash of the chain of (inlined function, call site) pairs; 0 when not inlined.
    chain: u64,
}

/// Every function of a cubin and its line table.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    functions: Vec<Function>,
    /// The function symbols of each code section of the functions (each kernel, the functions it calls), sorted by
    /// start.
    code: Vec<Vec<CodeFunction>>,
    /// Per function, the index of its section's list in `code`.
    code_of: Vec<Option<usize>>,
    /// Function index by name (the first of a name), so that a lookup costs no scan of the functions.
    by_name: HashMap<String, usize>,
    /// Line rows per function (index into `functions`), sorted by offset, rows at one offset in table order.
    rows: Vec<Vec<lines::Row>>,
    files: Vec<lines::File>,
    dirs: Vec<String>,
    /// Names of inlined functions (`.debug_str` offsets resolved).
    names: Vec<String>,
    line_tables: Option<LineTables>,
    problems: Vec<String>,
}

impl SourceMap {
    /// Reads a cubin's functions and line tables. A cubin without line info gives a map with functions and no
    /// rows ([`SourceMap::line_tables`] is `Absent`); damaged line tables give what could be read and say what was
    /// wrong ([`SourceMap::problems`]). Only a cubin that is no ELF (or whose symbols are forged) is an error.
    pub fn from_cubin(bytes: &[u8]) -> Result<SourceMap, SourceError> {
        SourceMap::from_cubin_for(bytes, &|_| true)
    }

    /// [`SourceMap::from_cubin`] keeping only the functions `keep` accepts (by mangled name): a report needs the
    /// functions its samples name, and the map then costs what they need, whatever else the cubin holds. Whether
    /// the cubin has line tables is judged on all of them.
    pub fn from_cubin_for(bytes: &[u8], keep: &dyn Fn(&str) -> bool) -> Result<SourceMap, SourceError> {
        let elf = cubin::Cubin::parse(bytes, keep)?;
        let mut rows = vec![Vec::new(); elf.functions.len()];
        let mut problems = elf.problems;
        let had_section =
            matches!(elf.debug_line, Some(Ok(s)) if !s.is_empty()) || matches!(elf.debug_line, Some(Err(_)));
        let tables = match elf.debug_line {
            Some(Ok(section)) => lines::read(section, elf.debug_str, &elf.line_relocations, bytes.len(), &mut rows),
            Some(Err(why)) => {
                problems.push(why);
                lines::Tables::default()
            }
            None => lines::Tables::default(),
        };
        problems.extend(tables.problems);
        let line_tables = if tables.rows_placed > 0 {
            LineTables::Present
        } else if had_section || !problems.is_empty() {
            LineTables::Damaged
        } else {
            LineTables::Absent
        };
        let mut by_name = HashMap::with_capacity(elf.functions.len());
        for (i, f) in elf.functions.iter().enumerate() {
            by_name.entry(f.name.clone()).or_insert(i);
        }
        Ok(SourceMap {
            functions: elf.functions,
            code: elf.code,
            code_of: elf.code_of,
            by_name,
            rows,
            files: tables.files,
            dirs: tables.dirs,
            names: tables.names,
            line_tables: Some(line_tables),
            problems,
        })
    }

    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// Whether the cubin had line tables (built with `-lineinfo` or `-G`) and rows could be read from them.
    pub fn has_lines(&self) -> bool {
        self.line_tables() == LineTables::Present
    }

    /// Whether the cubin has line tables, none, or damaged ones.
    pub fn line_tables(&self) -> LineTables {
        self.line_tables.unwrap_or(LineTables::Absent)
    }

    /// What was damaged in the cubin's line tables and what was done about it, one sentence each.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// The function of this (mangled) name.
    pub fn function(&self, name: &str) -> Option<&Function> {
        self.by_name.get(name).map(|&i| &self.functions[i])
    }

    /// Where the instruction at `pc_offset` of `function` came from; `None` for an unknown function, an offset
    /// outside it, or a function without line rows.
    pub fn locate(&self, function: &str, pc_offset: u64) -> Option<Location> {
        let (rows, row) = self.row_at(function, pc_offset)?;
        Some(Location { position: self.position(row)?, inlined_at: self.inline_chain(rows, row) })
    }

    /// The line of the instruction at `pc_offset` of `function` as a key, where [`SourceMap::locate`] gives one:
    /// a lookup and a binary search, no text and no walk of the chain (its hash was computed with the table).
    /// Chains cut at [`MAX_INLINE_DEPTH`] keep the hash of their whole length.
    pub fn line_key(&self, function: &str, pc_offset: u64) -> Option<LineKey> {
        let (_, row) = self.row_at(function, pc_offset)?;
        self.files.get(row.file as usize)?;
        Some(LineKey { file: row.file, line: row.line, chain: row.chain })
    }

    /// The directory and file name of a key's line.
    pub fn file_of(&self, key: LineKey) -> (&str, &str) {
        let Some(f) = self.files.get(key.file as usize) else { return ("", "") };
        (self.dirs.get(f.dir as usize).map_or("", String::as_str), &f.name)
    }

    /// Every function symbol of `kernel`'s code section, sorted by start: the kernel and the functions it calls
    /// that were not inlined. Empty for an unknown kernel.
    pub fn code_functions(&self, kernel: &str) -> &[CodeFunction] {
        let list = self.by_name.get(kernel).and_then(|&i| self.code_of[i]);
        list.map_or(&[], |l| &self.code[l])
    }

    /// The function (index into [`SourceMap::code_functions`]) whose range holds the instruction at this offset of
    /// `kernel`'s section (CUPTI's PC offset): the innermost, since the kernel's symbol spans what it calls.
    pub fn function_at(&self, kernel: &str, pc_offset: u64) -> Option<usize> {
        functions::at(self.code_functions(kernel), pc_offset)
    }

    /// [`SourceMap::line_key`] for a line of the function holding the PC: `None` where the last line row before
    /// the PC is before that function's start. A compiler subroutine has no rows of its own, and the rows before it
    /// (the end of the previous function) say nothing about it; `cuptiGetSassToSourceCorrelation` and
    /// [`SourceMap::line_key`] still give that row.
    pub fn line_key_in_function(&self, kernel: &str, pc_offset: u64) -> Option<LineKey> {
        let (_, row) = self.row_in_function(kernel, pc_offset)?;
        self.files.get(row.file as usize)?;
        Some(LineKey { file: row.file, line: row.line, chain: row.chain })
    }

    /// [`SourceMap::locate`] for a line of the function holding the PC (as [`SourceMap::line_key_in_function`]).
    pub fn locate_in_function(&self, kernel: &str, pc_offset: u64) -> Option<Location> {
        let (rows, row) = self.row_in_function(kernel, pc_offset)?;
        Some(Location { position: self.position(row)?, inlined_at: self.inline_chain(rows, row) })
    }

    /// The call sites among `instructions` (section offset, SASS text, as `nvdisasm` gives them for `kernel`):
    /// each CALL whose target is a function of the kernel's section, sorted by offset. Calls to a function outside
    /// it are left out: no sample of the kernel can be in one.
    pub fn call_sites<'a>(
        &self,
        kernel: &str,
        instructions: impl IntoIterator<Item = (u64, &'a str)>,
    ) -> Vec<CallSite> {
        let code = self.code_functions(kernel);
        let mut out: Vec<CallSite> = instructions
            .into_iter()
            .filter_map(|(offset, text)| {
                let target = call_target(text)?;
                let callee = code.iter().position(|f| f.symbol == target)?;
                Some(CallSite { offset, caller: functions::at(code, offset)?, callee })
            })
            .collect();
        out.sort_unstable_by_key(|c| c.offset);
        out
    }

    fn row_in_function(&self, kernel: &str, pc_offset: u64) -> Option<(&[lines::Row], &lines::Row)> {
        let start = self.function_at(kernel, pc_offset).map_or(0, |i| self.code_functions(kernel)[i].start);
        self.row_at(kernel, pc_offset).filter(|(_, row)| row.offset >= start)
    }

    /// The rows of `function` and the last row at or before `pc_offset` (of rows sharing an address, the last is
    /// the innermost); `None` past the function's end or at a sequence's end.
    fn row_at(&self, function: &str, pc_offset: u64) -> Option<(&[lines::Row], &lines::Row)> {
        let index = *self.by_name.get(function)?;
        if pc_offset >= self.functions[index].size {
            return None;
        }
        let rows = &self.rows[index];
        let at = rows.partition_point(|r| r.offset <= pc_offset).checked_sub(1)?;
        let row = &rows[at];
        if row.end_sequence {
            return None;
        }
        Some((rows, row))
    }

    fn position(&self, row: &lines::Row) -> Option<Position> {
        let f = self.files.get(row.file as usize)?;
        let dir = self.dirs.get(f.dir as usize).cloned().unwrap_or_default();
        Some(Position { dir, file: f.name.clone(), line: row.line })
    }

    /// The call sites `row` was inlined through, each found by the link resolved when the table was read.
    fn inline_chain(&self, rows: &[lines::Row], row: &lines::Row) -> Vec<(String, Position)> {
        let mut out = Vec::new();
        for (name, site) in inline::chain(rows, row) {
            let Some(pos) = self.position(&rows[site]) else { break };
            out.push((self.names.get(name as usize).cloned().unwrap_or_default(), pos));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/cubins").join(name))
            .unwrap()
    }

    #[test]
    fn the_hot_lines_of_the_source_workload() {
        let m = SourceMap::from_cubin(&fixture("source_workload.sm_90.cubin")).unwrap();
        let names: Vec<(&str, u64)> = m.functions().iter().map(|f| (f.name.as_str(), f.size)).collect();
        assert_eq!(names, [("_Z9fma_chainPfi", 1408), ("_Z5chasePKjjiPj", 1920)]);
        assert!(m.has_lines());
        let at = |f: &str, pc: u64| m.locate(f, pc).map(|l| (l.position.file, l.position.line, l.inlined_at.len()));
        // The lines of workloads/cuda/source_workload.cu: the kernels' first lines, the dependent load (43) and the
        // FMA (51).
        assert_eq!(at("_Z5chasePKjjiPj", 0), Some(("source_workload.cu".into(), 40, 0)));
        assert_eq!(at("_Z5chasePKjjiPj", 0x330), Some(("source_workload.cu".into(), 43, 0)));
        assert_eq!(at("_Z9fma_chainPfi", 0x160), Some(("source_workload.cu".into(), 51, 0)));
        assert_eq!(m.locate("_Z5chasePKjjiPj", 0).unwrap().position.dir, "/work/main/workloads/cuda", "as nvcc saw it");
        assert_eq!(m.locate("_Z9fma_chainPfi", 1408), None, "past the end");
        assert_eq!(m.locate("nope", 0), None);
    }

    /// fixtures/cubins/inline.ptx (by ptxas 12.9): `inner` (helper.cuh:12) inlined into `outer` at helper.cuh:6,
    /// itself inlined into the kernel `scale` at a.cu:32.
    #[test]
    fn inlined_instructions_carry_their_call_sites() {
        let m = SourceMap::from_cubin(&fixture("inline.sm_90.cubin")).unwrap();
        let pos = |file: &str, line: u32| {
            let dir = if file == "a.cu" { "/src/dir" } else { "/src/dir/inc" };
            Position { dir: dir.into(), file: file.into(), line }
        };
        let l = m.locate("scale", 0x70).unwrap();
        assert_eq!(l.position, pos("helper.cuh", 12));
        assert_eq!(
            l.inlined_at,
            [("_Z5inneri".to_string(), pos("helper.cuh", 6)), ("_Z5outeri".to_string(), pos("a.cu", 32))]
        );
        // The call site's own row and the first inlined row share 0x60: the innermost wins, one level deep.
        let l = m.locate("scale", 0x60).unwrap();
        assert_eq!(
            (l.position, l.inlined_at),
            (pos("helper.cuh", 6), vec![("_Z5outeri".to_string(), pos("a.cu", 32))])
        );
        // Back in the kernel.
        assert_eq!(m.locate("scale", 0x90).unwrap(), Location { position: pos("a.cu", 33), inlined_at: vec![] });
    }

    #[test]
    fn not_a_cubin_is_an_error_and_no_lines_is_said() {
        assert!(matches!(SourceMap::from_cubin(b"not an elf"), Err(SourceError::NotElf(_))));
    }
}
