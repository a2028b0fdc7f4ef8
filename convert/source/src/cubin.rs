//! The parts of a cubin's ELF the source map needs: the functions (FUNC symbols, each with its own code section),
//! `.debug_line`, `.debug_str`, and the relocations that tie each line sequence to its function.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SymbolKind};

use crate::SourceError;
use crate::functions::CodeFunction;

/// Bytes of function names allowed beyond the cubin's own size: names are copied out of the string table, and
/// symbols naming overlapping offsets of one long string could otherwise copy it once per symbol.
const NAME_SLACK: usize = 64 << 10;

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

/// What a line sequence's relocation ties it to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Target {
    /// A function the map keeps (index into the functions).
    Kept(usize),
    /// A function left out (none of its PCs is asked about): its rows are read and dropped.
    LeftOut,
}

pub(crate) struct Cubin<'a> {
    pub functions: Vec<Function>,
    /// Every function symbol of each code section that holds a kept function, sorted by start.
    pub code: Vec<Vec<CodeFunction>>,
    /// Per function (same indexing), the index of its section's list in `code`.
    pub code_of: Vec<Option<usize>>,
    /// `.debug_line`'s bytes, `Err` (why) when its section header points outside the cubin.
    pub debug_line: Option<Result<&'a [u8], String>>,
    pub debug_str: &'a [u8],
    /// `(offset in .debug_line, the function it names)` of each address relocation against a function, sorted by
    /// offset.
    pub line_relocations: Vec<(u64, Target)>,
    /// What was damaged outside the line programs.
    pub problems: Vec<String>,
}

impl<'a> Cubin<'a> {
    /// The cubin's functions (those `keep` accepts) and what their line tables need.
    pub fn parse(bytes: &'a [u8], keep: &dyn Fn(&str) -> bool) -> Result<Cubin<'a>, SourceError> {
        let file = object::File::parse(bytes).map_err(|e| SourceError::NotElf(e.to_string()))?;
        if file.format() != object::BinaryFormat::Elf {
            return Err(SourceError::NotElf(format!("{:?}", file.format())));
        }
        let mut budget = bytes.len() + NAME_SLACK;
        let (functions, by_symbol) = functions(&file, &mut budget, keep)?;
        let (code, code_of) = code_functions(&file, &functions, &mut budget)?;
        let mut problems = Vec::new();
        let section = |name: &str| {
            let s = file.section_by_name(name)?;
            Some(s.data().map_err(|_| {
                let (start, size) = s.file_range().unwrap_or((0, 0));
                format!(
                    "the {name} section header points outside the cubin (bytes {start}..{} of {})",
                    start.saturating_add(size),
                    bytes.len()
                )
            }))
        };
        let debug_line = section(".debug_line");
        let debug_str = match section(".debug_str") {
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                problems.push(e);
                &[]
            }
            None => &[],
        };
        let mut line_relocations = Vec::new();
        if let Some(section) = file.section_by_name(".debug_line") {
            for (offset, r) in section.relocations() {
                if let RelocationTarget::Symbol(sym) = r.target()
                    && let Some(&f) = by_symbol.get(&sym.0)
                {
                    line_relocations.push((offset, f));
                }
            }
        }
        line_relocations.sort_unstable();
        Ok(Cubin { functions, code, code_of, debug_line, debug_str, line_relocations, problems })
    }
}

/// Takes a name's bytes from the budget of names (the cubin's size and [`NAME_SLACK`]), or says the names overlap.
fn spend(budget: &mut usize, name: &str) -> Result<(), SourceError> {
    *budget = budget.checked_sub(name.len()).ok_or_else(|| {
        SourceError::NotElf("its function names overlap: more bytes of names than the cubin holds".to_string())
    })?;
    Ok(())
}

/// The FUNC symbols with code that `keep` accepts, their names copied within the budget, and every function
/// symbol's target by symbol index (so that each relocation finds its function in one step).
fn functions(
    file: &object::File<'_>,
    budget: &mut usize,
    keep: &dyn Fn(&str) -> bool,
) -> Result<(Vec<Function>, HashMap<usize, Target>), SourceError> {
    let mut out = Vec::new();
    let mut by_symbol = HashMap::new();
    for s in file.symbols().filter(|s| s.kind() == SymbolKind::Text && s.size() > 0) {
        let Ok(name) = s.name() else { continue };
        if !keep(name) {
            by_symbol.insert(s.index().0, Target::LeftOut);
            continue;
        }
        by_symbol.entry(s.index().0).or_insert(Target::Kept(out.len()));
        spend(budget, name)?;
        out.push(Function { name: name.to_string(), symbol_index: s.index().0, size: s.size() });
    }
    Ok((out, by_symbol))
}

/// The function lists of the code sections and, per kept function, its section's list.
type SectionCode = (Vec<Vec<CodeFunction>>, Vec<Option<usize>>);

/// Every function symbol with code in the sections of the kept functions (lists sorted by start, the wider first
/// at one start), and per kept function the index of its section's list: a section is listed once however many
/// kept functions it holds. Names are within the budget.
fn code_functions(file: &object::File<'_>, kept: &[Function], budget: &mut usize) -> Result<SectionCode, SourceError> {
    let section_of =
        |index: usize| file.symbol_by_index(object::SymbolIndex(index)).ok().and_then(|s| s.section_index());
    let mut list_of: HashMap<object::SectionIndex, usize> = HashMap::new();
    let code_of: Vec<Option<usize>> = kept
        .iter()
        .map(|f| {
            let section = section_of(f.symbol_index)?;
            let next = list_of.len();
            Some(*list_of.entry(section).or_insert(next))
        })
        .collect();
    let mut lists: Vec<Vec<CodeFunction>> = vec![Vec::new(); list_of.len()];
    for s in file.symbols().filter(|s| s.kind() == SymbolKind::Text && s.size() > 0) {
        let (Some(section), Ok(name)) = (s.section_index(), s.name()) else { continue };
        let Some(&list) = list_of.get(&section) else { continue };
        spend(budget, name)?;
        // The kernel is the function its section is named after (`.text.<kernel>`); the others are what it calls.
        let section_name = file.section_by_index(section).ok().and_then(|x| x.name().ok()).unwrap_or_default();
        let is_kernel = section_name.strip_prefix(".text.") == Some(name);
        lists[list].push(CodeFunction::new(name, s.address(), s.size(), is_kernel));
    }
    for list in &mut lists {
        list.sort_by(|a, b| a.start.cmp(&b.start).then(b.size.cmp(&a.size)).then_with(|| a.symbol.cmp(&b.symbol)));
    }
    Ok((lists, code_of))
}
