//! The line programs of a cubin's `.debug_line`, run with gimli's state machine, with NVIDIA's inlining opcodes
//! (which gimli treats as unknown no-ops) read on the way: `0x90` sets the call-site context (the 1-based number of
//! the call site's row within the sequence; 0 = not inlined) and the inlined function's name, `0x91` the name
//! alone. Both are registers: they hold until set again.
//!
//! A damaged table is read as far as it goes: the units before the damage keep their rows, and what was wrong is
//! said in [`Tables::problems`]. Every cost is linear in the section: strings are interned (a directory named by a
//! thousand file entries is held once), and inline names share one budget, so that offsets overlapping into one long
//! `.debug_str` string cannot multiply it.

use std::collections::HashMap;

use gimli::{DebugLine, DebugLineOffset, EndianSlice, LineInstruction, LineRow, LittleEndian, Reader};

use crate::cubin::Target;

/// `DW_LNE_NVIDIA_inlined_call` and `DW_LNE_NVIDIA_set_function_name`.
const NV_INLINED_CALL: u8 = 0x90;
const NV_SET_FUNCTION_NAME: u8 = 0x91;

/// Paths longer than Linux's `PATH_MAX` are not paths a compiler wrote: they are cut, so that no path makes every
/// location that names it costly.
pub(crate) const MAX_PATH_BYTES: usize = 4096;

/// A cubin's line rows cannot outnumber a quarter of its bytes: each row stands for SASS instructions of 16 bytes
/// each, besides the bytes that encode the row itself (NVIDIA's tables: 53 rows in a 12,448-byte cubin). A table
/// with more is forged (one-byte rows at no address at all), and is refused whole rather than kept at 40 bytes a row.
fn most_rows(cubin_len: usize) -> usize {
    cubin_len / 4 + 4096
}

/// Bytes of inline names allowed beyond the size of `.debug_str` (names are interned per offset; overlapping
/// offsets into one string could otherwise copy it once per offset).
const NAME_SLACK: usize = 64 << 10;

/// One row of a function's line table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    /// SASS byte offset within the function.
    pub offset: u64,
    /// Index into the tables' files.
    pub file: u32,
    pub line: u32,
    /// 1-based number of this row within its sequence (what a context names).
    pub index: u32,
    /// The row number of the call site this row was inlined at; 0 when not inlined.
    pub context: u32,
    /// Index into the tables' names of the inlined function (meaningful when `context != 0`).
    pub function_name: u32,
    pub end_sequence: bool,
    /// 1 + the position of the call site's row among the same function's rows (0: none), resolved once after
    /// reading so that a chain is walked by index, not searched for at every level.
    pub parent: u32,
    /// A hash of the chain of (inlined function, call site) pairs this row was inlined through (0: not inlined),
    /// computed once with the links, so that grouping PCs by line costs no walk per PC.
    pub chain: u64,
}

/// A file entry: its directory (index into [`Tables::dirs`]) and name.
#[derive(Clone, Debug, Default)]
pub(crate) struct File {
    pub dir: u32,
    pub name: String,
}

/// What the line programs hold besides the rows.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    pub files: Vec<File>,
    pub dirs: Vec<String>,
    /// Names of inlined functions (`.debug_str` offsets resolved).
    pub names: Vec<String>,
    /// What was damaged, and what was done about it.
    pub problems: Vec<String>,
    /// Rows tied to a function (of the map or left out of it), none if the table was refused whole.
    pub rows_placed: usize,
}

type R<'a> = EndianSlice<'a, LittleEndian>;

/// Reads every line program of the section into `rows` (indexed like the cubin's functions): the n-th
/// `DW_LNE_set_address` of the section is relocated against the function of the n-th relocation (sorted by offset).
/// A unit that cannot be read ends the reading; the rows of the units before it are kept.
pub(crate) fn read(
    section: &[u8],
    debug_str: &[u8],
    relocations: &[(u64, Target)],
    cubin_len: usize,
    rows: &mut [Vec<Row>],
) -> Tables {
    let mut t = Tables::default();
    let mut state = ProgramState {
        debug_str,
        relocations,
        set_addresses: 0,
        unplaced_sequences: 0,
        rows_read: 0,
        rows_placed: 0,
        most_rows: most_rows(cubin_len),
        names: Names::new(debug_str.len()),
        unit_rows: Vec::new(),
    };
    let mut offset = 0usize;
    let mut units = 0usize;
    while offset < section.len() {
        let (files, dirs) = (t.files.len(), t.dirs.len());
        match read_unit(section, offset, &mut t, &mut state) {
            Ok(unit_end) => {
                for (function, row) in state.unit_rows.drain(..) {
                    if let Some(r) = rows.get_mut(function) {
                        r.push(row);
                    }
                }
                units += 1;
                if unit_end <= offset || state.rows_read > state.most_rows {
                    break;
                }
                offset = unit_end;
            }
            Err(e) => {
                t.files.truncate(files);
                t.dirs.truncate(dirs);
                state.unit_rows.clear();
                t.problems.push(format!(
                    "the line table is damaged at byte {offset} of .debug_line ({e}): the {units} units before it \
                     are read, the rest left out"
                ));
                break;
            }
        }
    }
    t.rows_placed = state.rows_placed;
    if state.rows_read > state.most_rows {
        rows.iter_mut().for_each(Vec::clear);
        t.rows_placed = 0;
        t.problems.push(format!(
            "its line tables hold more than {} rows, more than a {cubin_len}-byte cubin can describe: none is used",
            state.most_rows
        ));
    }
    if state.unplaced_sequences > 0 {
        t.problems.push(format!(
            "{} line sequences name no function of the cubin (no relocation ties their address to one): their rows \
             are left out",
            state.unplaced_sequences
        ));
    }
    if state.names.refused > 0 {
        t.problems.push(format!(
            "{} inline function names overlap beyond the size of .debug_str: left unnamed",
            state.names.refused
        ));
    }
    let mut links = crate::inline::Links::default();
    for r in rows.iter_mut() {
        r.sort_by_key(|row| (row.offset, row.index));
        links.resolve(r);
    }
    t.problems.extend(links.problems());
    t.names = state.names.list;
    t
}

/// What running the programs carries from one unit to the next.
struct ProgramState<'a> {
    debug_str: &'a [u8],
    relocations: &'a [(u64, Target)],
    set_addresses: usize,
    unplaced_sequences: usize,
    rows_read: usize,
    rows_placed: usize,
    most_rows: usize,
    names: Names,
    /// `(function, row)` of the unit being read: committed only once the whole unit has been read.
    unit_rows: Vec<(usize, Row)>,
}

/// Reads the unit at `offset`: its files into `t`, its rows into `state.unit_rows`. Returns where it ends.
fn read_unit(section: &[u8], offset: usize, t: &mut Tables, state: &mut ProgramState<'_>) -> gimli::Result<usize> {
    let debug_line = DebugLine::new(section, LittleEndian);
    let program = debug_line.program(DebugLineOffset(offset), 8, None, None)?;
    let header = program.header().clone();
    // Where this unit ends: its length field (4 bytes) plus the length it states.
    let unit_end = offset.saturating_add(4).saturating_add(header.unit_length());
    let program_start = section.len() - header.raw_program_buf().len();
    // NVIDIA puts a 4-byte `.debug_str` base for function names at the end of the header.
    let str_base = program_start
        .checked_sub(4)
        .and_then(|p| section.get(p..program_start))
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        // A header without the extension ends in its file table instead: keep a base only where one can be.
        .min(state.debug_str.len() as u32);
    let file_base = t.files.len() as u32;
    add_files(&header, t);
    run_program(program, file_base, str_base, state)?;
    Ok(unit_end)
}

/// The unit's directories (interned: file entries name them by index) and files, DWARF 2's 1-based numbering.
fn add_files(header: &gimli::LineProgramHeader<R<'_>>, t: &mut Tables) {
    let text = |v: Option<gimli::AttributeValue<R<'_>>>| -> String {
        match v {
            Some(gimli::AttributeValue::String(s)) => {
                let s = s.slice();
                String::from_utf8_lossy(&s[..s.len().min(MAX_PATH_BYTES)]).into_owned()
            }
            _ => String::new(),
        }
    };
    let dir_base = t.dirs.len() as u32;
    let dir_count = header.include_directories().len() as u64 + 1;
    for d in 0..dir_count {
        t.dirs.push(text(header.directory(d)));
    }
    for index in 1..=header.file_names().len() as u64 {
        let file = match header.file(index) {
            Some(f) => File {
                dir: if f.directory_index() < dir_count { dir_base + f.directory_index() as u32 } else { u32::MAX },
                name: text(Some(f.path_name())),
            },
            None => File { dir: u32::MAX, name: String::new() },
        };
        t.files.push(file);
    }
}

/// Interned function names of inlined calls, within a budget of bytes.
struct Names {
    index: HashMap<u64, u32>,
    list: Vec<String>,
    budget: usize,
    refused: usize,
}

impl Names {
    fn new(debug_str_len: usize) -> Names {
        // Index 0 is the empty name a row without an inlined call carries.
        Names { index: HashMap::new(), list: vec![String::new()], budget: debug_str_len + NAME_SLACK, refused: 0 }
    }

    /// The name at this `.debug_str` offset, interned; the empty name once the budget is spent.
    fn at(&mut self, debug_str: &[u8], offset: u64) -> u32 {
        if let Some(&i) = self.index.get(&offset) {
            return i;
        }
        let text = debug_str
            .get(usize::try_from(offset).unwrap_or(usize::MAX)..)
            .map(|s| &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())])
            .unwrap_or_default();
        if text.len() > self.budget {
            self.refused += 1;
            return 0;
        }
        self.budget -= text.len();
        let i = self.list.len() as u32;
        self.list.push(String::from_utf8_lossy(text).into_owned());
        self.index.insert(offset, i);
        i
    }
}

fn run_program(
    mut program: gimli::IncompleteLineProgram<R<'_>>,
    file_base: u32,
    str_base: u32,
    state: &mut ProgramState<'_>,
) -> gimli::Result<()> {
    let header = program.header().clone();
    let mut instructions = header.instructions();
    let mut row = LineRow::new(&header);
    let (mut context, mut function_name) = (0u32, 0u32);
    let mut function: Option<Target> = None;
    let mut index = 0u32;
    while let Some(instruction) = instructions.next_instruction(&header)? {
        match instruction {
            LineInstruction::UnknownExtended(op, mut args) if op.0 == NV_INLINED_CALL => {
                context = args.read_uleb128()? as u32;
                let name = args.read_uleb128()?;
                function_name = state.names.at(state.debug_str, name.saturating_add(u64::from(str_base)));
                continue;
            }
            LineInstruction::UnknownExtended(op, mut args) if op.0 == NV_SET_FUNCTION_NAME => {
                let name = args.read_uleb128()?;
                function_name = state.names.at(state.debug_str, name.saturating_add(u64::from(str_base)));
                continue;
            }
            LineInstruction::SetAddress(_) => {
                function = state.relocations.get(state.set_addresses).map(|r| r.1);
                state.set_addresses += 1;
            }
            _ => {}
        }
        if row.execute(instruction, &mut program)? {
            index = index.saturating_add(1);
            state.rows_read += 1;
            if state.rows_read > state.most_rows {
                // Forged: stop here (the caller drops every row and says why).
                return Ok(());
            }
            state.rows_placed += usize::from(function.is_some());
            if let Some(Target::Kept(f)) = function {
                state.unit_rows.push((
                    f,
                    Row {
                        offset: row.address(),
                        file: file_base.saturating_add((row.file_index() as u32).saturating_sub(1)),
                        line: row.line().map_or(0, |l| l.get() as u32),
                        index,
                        context,
                        function_name,
                        end_sequence: row.end_sequence(),
                        parent: 0,
                        chain: 0,
                    },
                ));
            }
            if row.end_sequence() {
                if function.is_none() {
                    state.unplaced_sequences += 1;
                }
                // A new sequence: a new function, rows counted afresh, no inlining.
                index = 0;
                context = 0;
                function_name = 0;
                function = None;
            }
            row.reset(&header);
        }
    }
    Ok(())
}
