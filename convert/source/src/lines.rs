//! The line programs of a cubin's `.debug_line`, run with gimli's state machine, with NVIDIA's inlining opcodes
//! (which gimli treats as unknown no-ops) read on the way: `0x90` sets the call-site context (the 1-based number of
//! the call site's row within the sequence; 0 = not inlined) and the inlined function's name, `0x91` the name
//! alone. Both are registers: they hold until set again.

use std::collections::HashMap;

use gimli::{DebugLine, DebugLineOffset, EndianSlice, LineInstruction, LineRow, LittleEndian, Reader};

use crate::{Position, SourceError};

/// `DW_LNE_NVIDIA_inlined_call` and `DW_LNE_NVIDIA_set_function_name`.
const NV_INLINED_CALL: u8 = 0x90;
const NV_SET_FUNCTION_NAME: u8 = 0x91;

/// One row of a function's line table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    /// SASS byte offset within the function.
    pub offset: u64,
    /// Index into the map's files.
    pub file: u32,
    pub line: u32,
    /// 1-based number of this row within its sequence (what a context names).
    pub index: u32,
    /// The row number of the call site this row was inlined at; 0 when not inlined.
    pub context: u32,
    /// Index into the map's names of the inlined function (meaningful when `context != 0`).
    pub function_name: u32,
    pub end_sequence: bool,
}

type R<'a> = EndianSlice<'a, LittleEndian>;

fn err(e: impl std::fmt::Display) -> SourceError {
    SourceError::Lines(e.to_string())
}

/// Reads every line program of the section into `rows` (indexed like the cubin's functions): the n-th
/// `DW_LNE_set_address` of the section is relocated against the function of the n-th relocation (sorted by offset).
/// Returns the file table (all programs' files) and the names of inlined functions.
pub(crate) fn read(
    section: &[u8],
    debug_str: &[u8],
    relocations: &[(u64, usize)],
    rows: &mut [Vec<Row>],
) -> Result<(Vec<Position>, Vec<String>), SourceError> {
    let debug_line = DebugLine::new(section, LittleEndian);
    let mut files = Vec::new();
    let mut names = Names::default();
    let mut set_addresses = 0usize;
    let mut offset = 0usize;
    while offset < section.len() {
        let program = debug_line.program(DebugLineOffset(offset), 8, None, None).map_err(err)?;
        let header = program.header().clone();
        // Where this unit ends: its length field (4 bytes) plus the length it states.
        let unit_end = offset + 4 + header.unit_length();
        let program_start = section.len() - header.raw_program_buf().len();
        // NVIDIA puts a 4-byte `.debug_str` base for function names at the end of the header.
        let str_base = program_start
            .checked_sub(4)
            .and_then(|p| section.get(p..program_start))
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            // A header without the extension ends in its file table instead: keep a base only where one can be.
            .min(debug_str.len() as u32);
        let file_base = files.len() as u32;
        for index in 1..=file_count(&header) {
            files.push(file_position(&header, index as u64));
        }
        run_program(program, file_base, str_base, debug_str, relocations, &mut set_addresses, &mut names, rows)?;
        if unit_end <= offset {
            break;
        }
        offset = unit_end;
    }
    for r in rows.iter_mut() {
        r.sort_by_key(|row| (row.offset, row.index));
    }
    Ok((files, names.list))
}

/// Interned function names of inlined calls.
#[derive(Default)]
struct Names {
    index: HashMap<u64, u32>,
    list: Vec<String>,
}

impl Names {
    /// The name at this `.debug_str` offset, interned.
    fn at(&mut self, debug_str: &[u8], offset: u64) -> u32 {
        let next = self.list.len() as u32;
        *self.index.entry(offset).or_insert_with(|| {
            let text = debug_str
                .get(offset as usize..)
                .map(|s| &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())])
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .unwrap_or_default();
            self.list.push(text);
            next
        })
    }
}

fn file_count(header: &gimli::LineProgramHeader<R<'_>>) -> usize {
    header.file_names().len()
}

/// A file entry (1-based, DWARF 2) as directory and name.
fn file_position(header: &gimli::LineProgramHeader<R<'_>>, index: u64) -> Position {
    let text = |v: Option<gimli::AttributeValue<R<'_>>>| -> String {
        match v {
            Some(gimli::AttributeValue::String(s)) => s.to_string_lossy().into_owned(),
            _ => String::new(),
        }
    };
    match header.file(index) {
        Some(f) => Position { dir: text(f.directory(header)), file: text(Some(f.path_name())), line: 0 },
        None => Position { dir: String::new(), file: String::new(), line: 0 },
    }
}

#[allow(clippy::too_many_arguments)]
fn run_program(
    mut program: gimli::IncompleteLineProgram<R<'_>>,
    file_base: u32,
    str_base: u32,
    debug_str: &[u8],
    relocations: &[(u64, usize)],
    set_addresses: &mut usize,
    names: &mut Names,
    rows: &mut [Vec<Row>],
) -> Result<(), SourceError> {
    let header = program.header().clone();
    let mut instructions = header.instructions();
    let mut row = LineRow::new(&header);
    let (mut context, mut function_name) = (0u32, 0u32);
    let mut function: Option<usize> = None;
    let mut index = 0u32;
    while let Some(instruction) = instructions.next_instruction(&header).map_err(err)? {
        match instruction {
            LineInstruction::UnknownExtended(op, mut args) if op.0 == NV_INLINED_CALL => {
                context = args.read_uleb128().map_err(err)? as u32;
                let name = args.read_uleb128().map_err(err)?;
                function_name = names.at(debug_str, name + u64::from(str_base));
                continue;
            }
            LineInstruction::UnknownExtended(op, mut args) if op.0 == NV_SET_FUNCTION_NAME => {
                let name = args.read_uleb128().map_err(err)?;
                function_name = names.at(debug_str, name + u64::from(str_base));
                continue;
            }
            LineInstruction::SetAddress(_) => {
                function = relocations.get(*set_addresses).map(|r| r.1);
                *set_addresses += 1;
            }
            _ => {}
        }
        if row.execute(instruction, &mut program).map_err(err)? {
            index += 1;
            if let Some(f) = function.and_then(|f| rows.get_mut(f)) {
                f.push(Row {
                    offset: row.address(),
                    file: file_base + (row.file_index() as u32).saturating_sub(1),
                    line: row.line().map_or(0, |l| l.get() as u32),
                    index,
                    context,
                    function_name,
                    end_sequence: row.end_sequence(),
                });
            }
            if row.end_sequence() {
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
