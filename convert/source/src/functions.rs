//! The functions that share a kernel's code section. A kernel's `.text.<kernel>` section holds the kernel and every
//! function it CALLs that was not inlined: a `__noinline__` device function (a LOCAL symbol `$<kernel>$<callee>`)
//! and the compiler's subroutines (the IEEE division's slow path,
//! `$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath`, WEAK), each a FUNC symbol with its own range. CUPTI's PC
//! offsets are relative to the section, and the kernel's own symbol usually spans all of it, so the function a PC
//! is in is the innermost symbol whose range holds it.
//!
//! Call sites come from the SASS (`CALL.REL.NOINC `(target)``, as `nvdisasm` prints it): the cubin's relocations
//! do not name them (a relative call within one section needs none).

use serde::Serialize;

/// Bytes of one SASS instruction (sm_70 and later): the return point of a CALL is the instruction after it.
pub const INSTRUCTION_BYTES: u64 = 16;

/// What a function of a kernel's code is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FunctionKind {
    /// The kernel itself (the symbol CUPTI names the samples by).
    Kernel,
    /// A device function the compiler did not inline (`__noinline__`, or too large).
    DeviceFunction,
    /// A subroutine of the compiler's runtime (`__cuda_...`, `__internal_...`): division, square root slow paths.
    Subroutine,
}

/// A function symbol within a kernel's code section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CodeFunction {
    /// The symbol as the cubin spells it (`$_Z5callsPKjPKfS2_iiPf$_Z6gatherPKjji`).
    pub symbol: String,
    /// The function's own name: the symbol without the `$<caller>$` or `$__internal_N_$` prefix the compiler adds
    /// to a local copy (`_Z6gatherPKjji`), still mangled where it was.
    pub name: String,
    /// Offset of its first instruction in the section (CUPTI's PC offsets are in the same terms).
    pub start: u64,
    /// Bytes of SASS.
    pub size: u64,
    pub kind: FunctionKind,
}

impl CodeFunction {
    pub(crate) fn new(symbol: &str, start: u64, size: u64, is_kernel: bool) -> CodeFunction {
        let name = own_name(symbol).to_string();
        let kind = if is_kernel {
            FunctionKind::Kernel
        } else if name.starts_with("__cuda") || name.starts_with("__internal") || symbol.starts_with("$__internal") {
            FunctionKind::Subroutine
        } else {
            FunctionKind::DeviceFunction
        };
        CodeFunction { symbol: symbol.to_string(), name, start, size, kind }
    }

    /// Whether the instruction at this section offset is in the function.
    pub fn contains(&self, offset: u64) -> bool {
        offset >= self.start && offset - self.start < self.size
    }
}

/// The name after the last `$` of a compiler-made local symbol (`$A$B` -> `B`); the symbol itself otherwise.
fn own_name(symbol: &str) -> &str {
    match symbol.strip_prefix('$').and_then(|s| s.rsplit('$').next()) {
        Some(last) if !last.is_empty() => last,
        _ => symbol,
    }
}

/// Functions looked back at from an offset for one that holds it, before the first (the kernel, which spans the
/// section): a compiler lays the functions of a section one after another, so the nearest is the one; a forged
/// table of 100,000 overlapping symbols cannot make every PC a scan of them all.
const LOOK_BACK: usize = 64;

/// The function of `functions` (sorted by start) that holds `offset`: the innermost, the one starting last, since
/// the kernel's symbol spans the functions it calls.
pub(crate) fn at(functions: &[CodeFunction], offset: u64) -> Option<usize> {
    let end = functions.partition_point(|f| f.start <= offset);
    let nearest = (end.saturating_sub(LOOK_BACK)..end).rev().find(|&i| functions[i].contains(offset));
    nearest.or_else(|| functions.first().filter(|f| f.contains(offset)).map(|_| 0))
}

/// A CALL instruction of a kernel's code: where it is and which functions it goes from and to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CallSite {
    /// Section offset of the CALL.
    pub offset: u64,
    /// The function holding the CALL (index into [`crate::SourceMap::code_functions`]).
    pub caller: usize,
    /// The function called (same indexing).
    pub callee: usize,
}

impl CallSite {
    /// Where the callee returns to: the instruction after the CALL.
    pub fn return_offset(&self) -> u64 {
        self.offset.saturating_add(INSTRUCTION_BYTES)
    }
}

/// The target of a call instruction as `nvdisasm` prints it (`CALL.REL.NOINC `($_Z5calls...$_Z6gatherPKjji)``,
/// predicated or not); `None` for any other instruction, or a call through a register or to an address.
pub fn call_target(instruction: &str) -> Option<&str> {
    let t = instruction.trim();
    let t = if t.starts_with('@') { t.split_once(char::is_whitespace)?.1.trim_start() } else { t };
    let rest = t.strip_prefix("CALL")?;
    if !rest.starts_with(['.', ' ']) {
        return None;
    }
    let (_, quoted) = rest.split_once("`(")?;
    let (name, _) = quoted.split_once(')')?;
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_names_and_kinds_of_compiler_made_symbols() {
        let f = CodeFunction::new("$_Z5callsPKjPKfS2_iiPf$_Z6gatherPKjji", 0xa80, 2960, false);
        assert_eq!((f.name.as_str(), f.kind), ("_Z6gatherPKjji", FunctionKind::DeviceFunction));
        let f = CodeFunction::new("$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath", 0x1610, 1904, false);
        assert_eq!((f.name.as_str(), f.kind), ("__cuda_sm3x_div_rn_noftz_f32_slowpath", FunctionKind::Subroutine));
        let f = CodeFunction::new("_Z5callsPKjPKfS2_iiPf", 0, 7552, true);
        assert_eq!((f.name.as_str(), f.kind), ("_Z5callsPKjPKfS2_iiPf", FunctionKind::Kernel));
        assert_eq!(own_name("$"), "$");
        assert_eq!(own_name("$a$"), "$a$");
    }

    #[test]
    fn call_targets_as_nvdisasm_prints_them() {
        assert_eq!(
            call_target("CALL.REL.NOINC `($_Z5callsPKjPKfS2_iiPf$_Z6gatherPKjji)"),
            Some("$_Z5callsPKjPKfS2_iiPf$_Z6gatherPKjji")
        );
        assert_eq!(call_target("@!P0 CALL.REL.NOINC `(foo)"), Some("foo"));
        assert_eq!(call_target("CALL.ABS.NOINC `(bar)"), Some("bar"));
        assert_eq!(call_target("CALL.REL.NOINC R4"), None);
        assert_eq!(call_target("RET.REL.NODEC R8 `(_Z5callsPKjPKfS2_iiPf)"), None);
        assert_eq!(call_target("CALLX `(x)"), None);
        assert_eq!(call_target("BRA `(.L_x_40)"), None);
        assert_eq!(call_target("CALL.REL `()"), None);
    }

    #[test]
    fn the_innermost_function_holds_an_offset() {
        let fs = [
            CodeFunction::new("k", 0, 0x1d80, true),
            CodeFunction::new("$k$g", 0xa80, 0xb90, false),
            CodeFunction::new("$__internal_0_$s", 0x1610, 0x770, false),
        ];
        let at = |o| at(&fs, o).map(|i| fs[i].name.as_str());
        assert_eq!(
            [at(0), at(0xa70), at(0xa80), at(0x1600), at(0x1610), at(0x1d70)],
            [Some("k"), Some("k"), Some("g"), Some("g"), Some("s"), Some("s")]
        );
        assert_eq!(at(0x1d80), None);
        // 100,000 one-instruction functions after the kernel's own code: a PC past them is the kernel's, found
        // without looking at them all.
        let mut many = vec![CodeFunction::new("k", 0, 0x1000_0000, true)];
        many.extend((0..100_000u64).map(|i| CodeFunction::new(&format!("$k$f{i}"), 0x100 + 16 * i, 16, false)));
        assert_eq!(super::at(&many, 0x100 + 16 * 99_999), Some(100_000));
        assert_eq!(super::at(&many, 0x0fff_0000), Some(0));
        assert_eq!(super::at(&many, 0x10), Some(0));
    }
}
