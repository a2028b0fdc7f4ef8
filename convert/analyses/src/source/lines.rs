//! A kernel's lines ranked by samples: each line keyed by the function that holds it and its line in that
//! function's own rows, so that a compiler subroutine without rows of its own (the division's slow path) is one
//! "no line" row of its function, not charged to the last line before it (the end of another function).

use std::collections::HashMap;

use cutr_source::{FunctionKind, LineKey, SourceMap};

use super::{ByReason, LineRow, add, sorted, total};

/// A line's samples, function, key, lowest PC and samples by reason, as ranked.
type Ranked = (u64, Option<usize>, Option<LineKey>, u64, ByReason);

/// One sampled PC of a kernel, its `file:line` and function filled in on the way.
pub(crate) struct PcSamples {
    pub pc: u64,
    pub location: String,
    pub function: String,
    pub stalls: ByReason,
}

/// A kernel's lines ranked by samples, the first `limit`, each PC's `file:line` filled in on the way. Samples are
/// grouped by [`LineKey`] (integers), and only the lines shown get their text and inline chains: a chain 64 levels
/// deep at every one of 100,000 PCs costs 100,000 keys, not 6.4 million strings. PCs in a called function with no
/// line of its own make one row of that function with no file and line 0.
pub(crate) fn top_lines(
    map: &SourceMap,
    mangled: &str,
    pcs: &mut [PcSamples],
    limit: usize,
    pct: impl Fn(u64) -> f64,
) -> Vec<LineRow> {
    let code = map.code_functions(mangled);
    // Per (function, line): a PC on it (the lowest, to locate it by) and its samples by reason.
    let mut lines: HashMap<(Option<usize>, Option<LineKey>), (u64, ByReason)> = HashMap::new();
    for p in pcs.iter_mut() {
        let function = super::functions::function_of(map, mangled, p.pc);
        let key = map.line_key_in_function(mangled, p.pc);
        let called = function.is_some_and(|f| code[f].kind != FunctionKind::Kernel);
        match key {
            Some(key) => p.location = format!("{}:{}", map.file_of(key).1, key.line),
            None if called && map.has_lines() => {}
            None => continue,
        }
        let entry = lines.entry((function, key)).or_insert_with(|| (p.pc, ByReason::new()));
        entry.0 = entry.0.min(p.pc);
        add(&mut entry.1, &p.stalls);
    }
    let mut ranked: Vec<Ranked> = lines.into_iter().map(|((f, key), (pc, s))| (total(&s), f, key, pc, s)).collect();
    let file = |k: Option<LineKey>| k.map_or("", |k| map.file_of(k).1);
    ranked.sort_by(|a, b| {
        let line = |k: Option<LineKey>| k.map_or(0, |k| k.line);
        b.0.cmp(&a.0).then_with(|| (line(a.2), file(a.2), a.3).cmp(&(line(b.2), file(b.2), b.3)))
    });
    ranked.truncate(limit);
    let names = super::functions::names(map, mangled);
    ranked
        .into_iter()
        .filter_map(|(n, f, key, pc, s)| {
            let function = f.and_then(|f| names.get(f)).cloned().unwrap_or_default();
            let row = |file: String, dir: String, line: u32, inlined_at: Vec<String>| LineRow {
                file,
                dir,
                line,
                samples: n,
                percent: pct(n),
                stalls: sorted(&s),
                inlined_at,
                function: function.clone(),
                called_from: Vec::new(),
            };
            if key.is_none() {
                return Some(row(String::new(), String::new(), 0, Vec::new()));
            }
            let l = map.locate_in_function(mangled, pc)?;
            let inlined_at = l
                .inlined_at
                .iter()
                .map(|(f, p)| format!("{}@{}:{}", cutr_model::demangle::demangle(f), p.file, p.line))
                .collect();
            Some(row(l.position.file, l.position.dir, l.position.line, inlined_at))
        })
        .collect()
}
