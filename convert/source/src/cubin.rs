//! The parts of a cubin's ELF the source map needs: the functions (FUNC symbols, each with its own code section),
//! `.debug_line`, `.debug_str`, and the relocations that tie each line sequence to its function.

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SymbolKind};

use crate::SourceError;

/// A kernel or device function of the cubin.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Function {
    /// The mangled name, as CUPTI's PC records and `cuptiGetSassToSourceCorrelation` name it.
    pub name: String,
    /// Its index in `.symtab` (CUPTI's `functionIndex`).
    pub symbol_index: usize,
    /// Bytes of SASS.
    pub size: u64,
}

pub(crate) struct Cubin<'a> {
    pub functions: Vec<Function>,
    pub debug_line: Option<&'a [u8]>,
    pub debug_str: &'a [u8],
    /// `(offset in .debug_line, index into functions)` of each address relocation, sorted by offset.
    pub line_relocations: Vec<(u64, usize)>,
}

impl<'a> Cubin<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Cubin<'a>, SourceError> {
        let file = object::File::parse(bytes).map_err(|e| SourceError::NotElf(e.to_string()))?;
        if file.format() != object::BinaryFormat::Elf {
            return Err(SourceError::NotElf(format!("{:?}", file.format())));
        }
        let functions: Vec<Function> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .filter_map(|s| {
                Some(Function { name: s.name().ok()?.to_string(), symbol_index: s.index().0, size: s.size() })
            })
            .collect();
        let data = |name: &str| file.section_by_name(name).and_then(|s| s.data().ok());
        let debug_line = data(".debug_line");
        let debug_str = data(".debug_str").unwrap_or(&[]);
        let mut line_relocations = Vec::new();
        if let Some(section) = file.section_by_name(".debug_line") {
            for (offset, r) in section.relocations() {
                if let RelocationTarget::Symbol(sym) = r.target()
                    && let Some(f) = functions.iter().position(|f| f.symbol_index == sym.0)
                {
                    line_relocations.push((offset, f));
                }
            }
        }
        line_relocations.sort_unstable();
        Ok(Cubin { functions, debug_line, debug_str, line_relocations })
    }
}
