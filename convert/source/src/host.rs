//! Host code addresses -> function names, from the ELF files the recorded process had mapped: the faulting
//! instruction of a unified memory CPU page fault, say. A name is given only when the file here is the one that
//! was mapped (same GNU build id); otherwise the reason is given instead of a guess.
//!
//! Files are read through `object`'s [`ReadCache`] (only the headers and symbol tables are read, so a 500 MB
//! `libtorch_cpu.so` costs its symbol table, not its size), once per path; only function symbols are kept.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use object::read::ReadCache;
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// Why an address has no function name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Unresolved {
    /// The file cannot be opened on this machine (another host, or deleted), or is not a regular file.
    NotReadable,
    /// The file is not an ELF file `object` can parse.
    NotElf,
    /// The file here was built differently from the one that was mapped.
    BuildIdDiffers,
    /// The recording has no build id for the file, so the file here cannot be shown to be the one mapped.
    NoBuildId,
    /// No loadable segment of the file holds the offset.
    OutsideSegments,
    /// No function symbol covers the address (a stripped file, or code without symbols).
    NoSymbol,
}

impl Unresolved {
    /// The reason as reports print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Unresolved::NotReadable => "file not readable here",
            Unresolved::NotElf => "not an ELF file",
            Unresolved::BuildIdDiffers => "build id differs",
            Unresolved::NoBuildId => "no build id recorded",
            Unresolved::OutsideSegments => "offset outside the file's segments",
            Unresolved::NoSymbol => "no symbol at the address",
        }
    }
}

/// A function symbol: [address, address + size) in the file's virtual addresses.
struct Function {
    address: u64,
    size: u64,
    name: String,
}

/// What one file offers: its loadable segments (virtual address, file offset, file size) and functions by address.
struct FileSymbols {
    build_id: Vec<u8>,
    segments: Vec<(u64, u64, u64)>,
    functions: Vec<Function>,
}

impl FileSymbols {
    fn read(path: &Path) -> Result<FileSymbols, Unresolved> {
        // Only regular files: a recording naming a FIFO or a device would otherwise block or read forever.
        if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            return Err(Unresolved::NotReadable);
        }
        let file = File::open(path).map_err(|_| Unresolved::NotReadable)?;
        let cache = ReadCache::new(file);
        let elf = object::File::parse(&cache).map_err(|_| Unresolved::NotElf)?;
        let build_id = elf.build_id().ok().flatten().unwrap_or_default().to_vec();
        let segments = elf
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (s.address(), offset, size)
            })
            .collect();
        let mut functions: Vec<Function> = elf
            .symbols()
            .chain(elf.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .filter_map(|s| Some(Function { address: s.address(), size: s.size(), name: s.name().ok()?.to_string() }))
            .collect();
        // The static and dynamic tables name most functions twice: keep one of each address (the first name).
        functions.sort_by_key(|f| f.address);
        functions.dedup_by_key(|f| f.address);
        Ok(FileSymbols { build_id, segments, functions })
    }

    /// The function holding file offset `offset`.
    fn function_at(&self, offset: u64) -> Result<&str, Unresolved> {
        let &(vaddr, seg_offset, _) = self
            .segments
            .iter()
            .find(|&&(_, o, size)| (o..o.saturating_add(size)).contains(&offset))
            .ok_or(Unresolved::OutsideSegments)?;
        let address = vaddr.wrapping_add(offset - seg_offset);
        let i = self.functions.partition_point(|f| f.address <= address);
        let f = i.checked_sub(1).map(|i| &self.functions[i]).ok_or(Unresolved::NoSymbol)?;
        // A symbol without a size (hand-written assembly) covers up to the next one.
        let covers = f.size == 0 || address - f.address < f.size;
        if covers { Ok(&f.name) } else { Err(Unresolved::NoSymbol) }
    }
}

/// Resolves addresses of many files, reading each file once.
#[derive(Default)]
pub struct HostSymbols {
    /// By the path the recording names.
    files: HashMap<String, Result<FileSymbols, Unresolved>>,
    /// Where to look, by file name, for a file not readable at its recorded path (another machine's `/tmp`).
    search_dirs: Vec<PathBuf>,
}

impl HostSymbols {
    pub fn new() -> HostSymbols {
        HostSymbols::default()
    }

    /// Files not readable at their recorded path are looked for by file name in `dirs`, in order (the first
    /// readable one is used; its build id is still checked).
    pub fn with_search_dirs(dirs: Vec<PathBuf>) -> HostSymbols {
        HostSymbols { search_dirs: dirs, ..Default::default() }
    }

    fn symbols(&mut self, path: &str) -> Result<&FileSymbols, Unresolved> {
        let dirs = &self.search_dirs;
        let read = || {
            let here = FileSymbols::read(Path::new(path));
            let name = Path::new(path).file_name();
            match (here, name) {
                (Err(Unresolved::NotReadable), Some(name)) => dirs
                    .iter()
                    .map(|d| FileSymbols::read(&d.join(name)))
                    .find(|r| !matches!(r, Err(Unresolved::NotReadable)))
                    .unwrap_or(Err(Unresolved::NotReadable)),
                (here, _) => here,
            }
        };
        self.files.entry(path.to_string()).or_insert_with(read).as_ref().map_err(|e| *e)
    }

    /// The (mangled) name of the function at `offset` in the file at `path`, which the recording says had build
    /// id `build_id` when it was mapped.
    pub fn function(&mut self, path: &str, build_id: &[u8], offset: u64) -> Result<String, Unresolved> {
        let symbols = self.symbols(path)?;
        if build_id.is_empty() {
            return Err(Unresolved::NoBuildId);
        }
        if symbols.build_id != build_id {
            return Err(Unresolved::BuildIdDiffers);
        }
        symbols.function_at(offset).map(str::to_string)
    }

    /// The GNU build id of the file at `path` (empty when it has none), for callers that record one.
    pub fn build_id(&mut self, path: &str) -> Result<Vec<u8>, Unresolved> {
        self.symbols(path).map(|s| s.build_id.clone())
    }
}
