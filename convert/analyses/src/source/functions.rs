//! A kernel's samples by function: each sampled PC placed in its function by the cubin's symbols (the kernel, a
//! device function it calls, a compiler subroutine), exclusive totals, and with the call sites `nvdisasm` found,
//! inclusive ones (the split of `callgraph`): each call site charged with what its callee spent.

use std::collections::HashMap;

use cutr_source::{CallSite, FunctionKind, SourceMap};
use serde::Serialize;

use super::callgraph::Calls;
use super::{ByReason, KernelSource, Stalls, add, sorted, total};

/// One function of a kernel's code.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionRow {
    /// Its own name, demangled (`gather(unsigned int const*, unsigned int, int)`,
    /// `__cuda_sm3x_div_rn_noftz_f32_slowpath`).
    pub name: String,
    /// The symbol as the cubin spells it (`$_Z5callsPKjPKfS2_iiPf$_Z6gatherPKjji`).
    pub symbol: String,
    pub kind: FunctionKind,
    /// Its range in the kernel's section (CUPTI's PC offsets are in the same terms).
    pub start: u64,
    pub size: u64,
    /// Samples at its own instructions, and their share of the kernel's.
    pub exclusive: u64,
    pub exclusive_percent: f64,
    /// Its own samples and those its call sites were charged with (callees of callees included); equal to
    /// `exclusive` where call sites are unknown.
    pub inclusive: u64,
    pub inclusive_percent: f64,
    /// Its own samples by stall reason.
    pub stalls: Stalls,
    /// Where it is called from, most charged first; empty for the kernel and where call sites are unknown.
    pub called_from: Vec<CallSiteRow>,
}

/// A CALL of one function from another.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallSiteRow {
    /// Section offset of the CALL.
    pub offset: u64,
    /// The calling function's name, demangled.
    pub caller: String,
    /// `file:line` of the call in the caller's own code (where the call is in an inlined function, the line it was
    /// inlined at); `+0x…` without line tables.
    pub line: String,
    /// Samples at the CALL and at its return point: how the callee's samples are split among its call sites.
    pub weight: u64,
    /// The callee's samples charged to this call (its callees' included), by stall reason.
    pub samples: u64,
    pub stalls: Stalls,
}

/// The demangled own names of `kernel`'s functions (index as [`SourceMap::code_functions`]).
pub(crate) fn names(map: &SourceMap, kernel: &str) -> Vec<String> {
    map.code_functions(kernel).iter().map(|f| cutr_model::demangle::demangle(&f.name)).collect()
}

/// The function holding a PC: the innermost by the symbols, the kernel's where no symbol holds it.
pub(crate) fn function_of(map: &SourceMap, kernel: &str, pc: u64) -> Option<usize> {
    map.function_at(kernel, pc).or_else(|| kernel_index(map, kernel))
}

fn kernel_index(map: &SourceMap, kernel: &str) -> Option<usize> {
    map.code_functions(kernel).iter().position(|f| f.kind == FunctionKind::Kernel)
}

/// Fills `k.functions`, `k.uncharged_samples`, `k.call_sites_unknown` and the lines' `called_from` from its PCs'
/// samples and its call sites (`Err`: why they are unknown; needed only where the kernel's section holds more than
/// one function). Returns a warning where its call graph was too deep or wide to follow whole.
pub(crate) fn attach(
    k: &mut KernelSource,
    pcs: &[(u64, ByReason)],
    map: &SourceMap,
    sites: Result<Vec<CallSite>, String>,
) -> Option<String> {
    let code = map.code_functions(&k.mangled);
    if code.is_empty() {
        return None;
    }
    let names = names(map, &k.mangled);
    let mut exclusive: Vec<ByReason> = vec![ByReason::new(); code.len()];
    let mut at: HashMap<u64, (usize, u64)> = HashMap::with_capacity(pcs.len());
    for (pc, stalls) in pcs {
        let Some(f) = function_of(map, &k.mangled, *pc) else { continue };
        add(&mut exclusive[f], stalls);
        at.insert(*pc, (f, total(stalls)));
    }
    let known = code.len() > 1 && sites.is_ok();
    let calls = match sites {
        _ if code.len() == 1 => Calls::default(),
        Ok(sites) => Calls::new(code, sites, |pc| at.get(&pc).map_or(0, |x| x.1)),
        Err(why) => {
            k.call_sites_unknown = Some(why);
            Calls::default()
        }
    };
    let charged = if known { charge(&calls, code, pcs, &at, &mut k.uncharged_samples) } else { Vec::new() };
    let pct = |n: u64| if k.samples > 0 { 100.0 * n as f64 / k.samples as f64 } else { 0.0 };
    // Per function: what its call sites were charged, and the sites calling it (one pass over the sites).
    let mut charged_in = vec![0u64; code.len()];
    let mut sites_into: Vec<Vec<usize>> = vec![Vec::new(); code.len()];
    for (s, site) in calls.sites.iter().enumerate() {
        charged_in[site.caller] = charged_in[site.caller].saturating_add(total(&charged[s]));
        sites_into[site.callee].push(s);
    }
    let mut rows: Vec<FunctionRow> = code
        .iter()
        .enumerate()
        .map(|(f, c)| {
            let own = total(&exclusive[f]);
            let inclusive = own.saturating_add(charged_in[f]);
            let mut called_from: Vec<CallSiteRow> = sites_into[f]
                .iter()
                .map(|&s| CallSiteRow {
                    offset: calls.sites[s].offset,
                    caller: names[calls.sites[s].caller].clone(),
                    line: caller_line(map, &k.mangled, calls.sites[s].offset),
                    weight: calls.weights[s],
                    samples: total(&charged[s]),
                    stalls: sorted(&charged[s]),
                })
                .collect();
            called_from.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.offset.cmp(&b.offset)));
            FunctionRow {
                name: names[f].clone(),
                symbol: c.symbol.clone(),
                kind: c.kind,
                start: c.start,
                size: c.size,
                exclusive: own,
                exclusive_percent: pct(own),
                inclusive,
                inclusive_percent: pct(inclusive),
                stalls: sorted(&exclusive[f]),
                called_from,
            }
        })
        .collect();
    rows.sort_by(|a, b| b.exclusive.cmp(&a.exclusive).then(a.start.cmp(&b.start)));
    for line in &mut k.lines {
        let Some(f) = rows.iter().find(|f| f.name == line.function && f.kind != FunctionKind::Kernel) else { continue };
        for site in &f.called_from {
            if !line.called_from.contains(&site.line) {
                line.called_from.push(site.line.clone());
            }
        }
    }
    k.functions = rows;
    (calls.cut > 0).then(|| {
        format!(
            "{}: the call paths of {} functions were cut at {} paths or {} calls deep: their samples are split among \
             the paths kept",
            k.name,
            calls.cut,
            super::callgraph::MAX_PATHS,
            super::callgraph::MAX_DEPTH
        )
    })
}

/// Per call site, the samples of its callee (and theirs) charged to it, by reason: each PC's count of each reason
/// split over its function's paths. Samples of a called function no path reaches are added to `uncharged`.
fn charge(
    calls: &Calls,
    code: &[cutr_source::CodeFunction],
    pcs: &[(u64, ByReason)],
    at: &HashMap<u64, (usize, u64)>,
    uncharged: &mut u64,
) -> Vec<ByReason> {
    let mut charged: Vec<ByReason> = vec![ByReason::new(); calls.sites.len()];
    for (pc, stalls) in pcs {
        let Some(&(f, n)) = at.get(pc) else { continue };
        if code[f].kind == FunctionKind::Kernel {
            continue;
        }
        if calls.paths[f].is_empty() {
            *uncharged = uncharged.saturating_add(n);
            continue;
        }
        for (reason, &n) in stalls {
            for (path, m) in calls.split(f, n) {
                for &s in &calls.paths[f][path].sites {
                    let sum = charged[s].entry(reason.clone()).or_default();
                    *sum = sum.saturating_add(m);
                }
            }
        }
    }
    charged
}

/// `file:line` of the call at `offset` in the caller's own code: the outermost call site where the CALL is in an
/// inlined function (the division's slow path is called from `a / b` in `ratio`, inlined at the user's line).
fn caller_line(map: &SourceMap, kernel: &str, offset: u64) -> String {
    match map.locate_in_function(kernel, offset) {
        Some(l) => {
            let p = l.inlined_at.last().map_or(&l.position, |(_, site)| site);
            format!("{}:{}", p.file, p.line)
        }
        None => format!("+{offset:#x}"),
    }
}
