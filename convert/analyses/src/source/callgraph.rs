//! The inclusive view of a kernel's samples: each sample in a called function is also charged to the call sites
//! that led to it, up to the kernel.
//!
//! A function called from several sites cannot tell from its samples which call they came from. Its samples are
//! split among its call sites in proportion to each site's weight: the samples at the CALL instruction and at its
//! return point (the instruction after it), which estimate how often each site calls. Where none of a function's
//! call sites has a sample, they share evenly. A callee of a callee is charged along every path from the kernel,
//! each path's share the product of the shares at each level. Counts are split by largest remainder, so the parts
//! of every count add up to it: a kernel's inclusive total is all its samples.
//!
//! A path that goes round (recursion) or leaves the kernel's known calls (a caller nothing calls) is left out, and
//! the function's other paths are scaled to the whole; a function with no path to the kernel keeps its samples
//! uncharged, which the report says.

use cutr_source::{CallSite, CodeFunction, FunctionKind};

/// Paths kept per function, and their depth: real GPU call graphs of functions not inlined are a few levels deep
/// and narrow; a forged one cannot make every sample carry thousands of stacks (each PC's count of each stall reason
/// is split over its function's paths, each path charging every site on it).
pub(crate) const MAX_PATHS: usize = 64;
pub(crate) const MAX_DEPTH: usize = 16;

/// A way from the kernel to a function: its call sites (indices), innermost first, and its share of the function's
/// samples.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CallPath {
    pub sites: Vec<usize>,
    pub share: f64,
}

/// The call sites of one kernel, their weights, and the paths of each function.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Calls {
    pub sites: Vec<CallSite>,
    /// Per site: samples at the CALL and at its return point.
    pub weights: Vec<u64>,
    /// Per function (index into the kernel's code functions): the paths its samples are split over; empty for the
    /// kernel and for a function no known call reaches.
    pub paths: Vec<Vec<CallPath>>,
    /// Functions whose paths were cut at [`MAX_PATHS`] or [`MAX_DEPTH`].
    pub cut: usize,
}

impl Calls {
    /// The call graph of `code` (a kernel's functions) from its call sites, each weighed by `samples_at(offset)`.
    pub fn new(code: &[CodeFunction], sites: Vec<CallSite>, samples_at: impl Fn(u64) -> u64) -> Calls {
        let weights: Vec<u64> =
            sites.iter().map(|s| samples_at(s.offset).saturating_add(samples_at(s.return_offset()))).collect();
        let mut calls = Calls { sites, weights, paths: Vec::new(), cut: 0 };
        let mut into: Vec<Vec<usize>> = vec![Vec::new(); code.len()];
        for (s, site) in calls.sites.iter().enumerate() {
            if let Some(list) = into.get_mut(site.callee) {
                list.push(s);
            }
        }
        for f in 0..code.len() {
            let mut walk = Walk { code, calls: &calls, into: &into, out: Vec::new(), visiting: Vec::new(), cut: false };
            if code[f].kind != FunctionKind::Kernel {
                walk.from(f, &mut Vec::new(), 1.0);
            }
            let (mut paths, cut) = (walk.out, walk.cut);
            let sum: f64 = paths.iter().map(|p| p.share).sum();
            if sum > 0.0 {
                paths.iter_mut().for_each(|p| p.share /= sum);
            }
            paths.retain(|p| p.share > 0.0);
            calls.cut += usize::from(cut);
            calls.paths.push(paths);
        }
        calls
    }

    /// Splits `n` samples of function `f` among its paths: `(path index, samples)` of the paths given any.
    pub fn split(&self, f: usize, n: u64) -> Vec<(usize, u64)> {
        let paths = self.paths.get(f).map_or(&[][..], Vec::as_slice);
        let parts = largest_remainder(n, paths.iter().map(|p| p.share));
        parts.into_iter().enumerate().filter(|(_, m)| *m > 0).collect()
    }
}

/// The depth-first walk from a function up its callers to the kernel.
struct Walk<'a> {
    code: &'a [CodeFunction],
    calls: &'a Calls,
    /// Per function, the sites calling it.
    into: &'a [Vec<usize>],
    out: Vec<CallPath>,
    visiting: Vec<usize>,
    cut: bool,
}

impl Walk<'_> {
    fn from(&mut self, f: usize, prefix: &mut Vec<usize>, share: f64) {
        if self.out.len() >= MAX_PATHS {
            self.cut = true;
            return;
        }
        if self.code[f].kind == FunctionKind::Kernel {
            self.out.push(CallPath { sites: prefix.clone(), share });
            return;
        }
        if self.visiting.contains(&f) {
            return;
        }
        if prefix.len() >= MAX_DEPTH {
            self.cut = true;
            return;
        }
        let sites = &self.into[f];
        let total = sites.iter().fold(0u64, |a, &s| a.saturating_add(self.calls.weights[s]));
        self.visiting.push(f);
        for &s in sites {
            let fraction =
                if total > 0 { self.calls.weights[s] as f64 / total as f64 } else { 1.0 / sites.len() as f64 };
            if fraction == 0.0 {
                continue;
            }
            prefix.push(s);
            self.from(self.calls.sites[s].caller, prefix, share * fraction);
            prefix.pop();
        }
        self.visiting.pop();
    }
}

/// `n` split in proportion to `shares` (summing to 1, or all empty): each part the floor of its quota, and the
/// rest one each to the largest remainders (the earlier first on ties), so the parts add up to `n` exactly.
pub(crate) fn largest_remainder(n: u64, shares: impl Iterator<Item = f64>) -> Vec<u64> {
    let quotas: Vec<f64> = shares.map(|s| n as f64 * s.clamp(0.0, 1.0)).collect();
    if quotas.is_empty() {
        return Vec::new();
    }
    let mut parts: Vec<u64> = quotas.iter().map(|q| q.floor() as u64).collect();
    let mut given = parts.iter().fold(0u64, |a, p| a.saturating_add(*p));
    // Rounding of shares that sum a hair over 1: take the excess back from the largest parts.
    while given > n {
        let i = (0..parts.len()).max_by_key(|&i| parts[i]).unwrap_or(0);
        parts[i] -= 1;
        given -= 1;
    }
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| (quotas[b] - quotas[b].floor()).total_cmp(&(quotas[a] - quotas[a].floor())).then(a.cmp(&b)));
    for i in order.into_iter().cycle().take((n - given) as usize) {
        parts[i] += 1;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code() -> Vec<CodeFunction> {
        let f = |symbol: &str, kind, start, size| CodeFunction {
            symbol: symbol.into(),
            name: symbol.into(),
            start,
            size,
            kind,
        };
        vec![
            f("k", FunctionKind::Kernel, 0, 0x1000),
            f("g", FunctionKind::DeviceFunction, 0x400, 0x200),
            f("s", FunctionKind::Subroutine, 0x800, 0x200),
            f("orphan", FunctionKind::DeviceFunction, 0xc00, 0x100),
        ]
    }

    #[test]
    fn largest_remainder_conserves_the_total() {
        assert_eq!(largest_remainder(10, [0.5, 0.5].into_iter()), [5, 5]);
        assert_eq!(largest_remainder(10, [1.0 / 3.0; 3].into_iter()), [4, 3, 3]);
        assert_eq!(largest_remainder(11_355_344, [104.0 / 220.0, 116.0 / 220.0].into_iter()), [5_367_981, 5_987_363]);
        assert_eq!(largest_remainder(7, [0.5000001, 0.5000001].into_iter()), [4, 3]);
        assert_eq!(largest_remainder(5, std::iter::empty()), Vec::<u64>::new());
        assert_eq!(largest_remainder(0, [0.2, 0.8].into_iter()), [0, 0]);
    }

    /// The kernel calls g at 0x10 and 0x100 and s at 0x200; g calls s at 0x410: s's samples go three ways (direct,
    /// through g's call from 0x10, through g's call from 0x100), by weights 1:2 at g and 2:6 at s.
    #[test]
    fn callees_of_callees_are_charged_along_every_path() {
        let site = |offset, caller, callee| CallSite { offset, caller, callee };
        let sites = vec![site(0x10, 0, 1), site(0x100, 0, 1), site(0x200, 0, 2), site(0x410, 1, 2), site(0xc10, 3, 2)];
        // Samples at each CALL and return point (the instruction 16 bytes on).
        let samples = |o: u64| match o {
            0x10 | 0x200 | 0x210 => 1,
            0x100 => 2,
            0x410 | 0x420 => 3,
            _ => 0,
        };
        let calls = Calls::new(&code(), sites, samples);
        assert_eq!(calls.weights, [1, 2, 2, 6, 0]);
        // Shares to 12 digits: products of fractions are not exact in binary.
        let shares = |f: usize| {
            calls.paths[f].iter().map(|p| (p.sites.clone(), (p.share * 1e12).round() / 1e12)).collect::<Vec<_>>()
        };
        assert_eq!(shares(0), []);
        assert_eq!(shares(1), [(vec![0], 0.333333333333), (vec![1], 0.666666666667)]);
        // The orphan's call (weight 0 among weights 8) gives nothing; s: 2/8 direct, 6/8 through g (1/3, 2/3).
        assert_eq!(shares(2), [(vec![2], 0.25), (vec![3, 0], 0.25), (vec![3, 1], 0.5)]);
        assert_eq!(shares(3), [], "nothing calls the orphan");
        assert_eq!(calls.split(2, 9), [(0, 2), (1, 2), (2, 5)]);
        assert_eq!(calls.split(3, 9), []);
        assert_eq!(calls.cut, 0);
    }

    #[test]
    fn sites_without_samples_share_evenly_and_recursion_ends() {
        let site = |offset, caller, callee| CallSite { offset, caller, callee };
        // g calls itself; the kernel calls g twice, neither call sampled.
        let calls = Calls::new(&code(), vec![site(0x10, 0, 1), site(0x20, 0, 1), site(0x450, 1, 1)], |_| 0);
        let shares = calls.paths[1].iter().map(|p| (p.sites.clone(), p.share)).collect::<Vec<_>>();
        assert_eq!(shares, [(vec![0], 0.5), (vec![1], 0.5)], "the recursive path is left out, the rest scaled");
        assert_eq!(calls.split(1, 3), [(0, 2), (1, 1)]);
    }

    /// Ten levels, each function called twice by the one above: 2^9 = 512 paths to the deepest, cut at 64, said.
    #[test]
    fn wide_call_graphs_are_cut_and_said() {
        let f = |i: u64| CodeFunction {
            symbol: format!("f{i}"),
            name: format!("f{i}"),
            start: i * 0x100,
            size: 0x100,
            kind: if i == 0 { FunctionKind::Kernel } else { FunctionKind::DeviceFunction },
        };
        let code: Vec<CodeFunction> = (0..10).map(f).collect();
        let sites: Vec<CallSite> = (1..10usize)
            .flat_map(|i| {
                let caller = (i as u64 - 1) * 0x100;
                [0x10, 0x40].map(|o| CallSite { offset: caller + o, caller: i - 1, callee: i })
            })
            .collect();
        let calls = Calls::new(&code, sites, |_| 1);
        assert_eq!(calls.paths.iter().map(Vec::len).collect::<Vec<_>>(), [0, 2, 4, 8, 16, 32, 64, 64, 64, 64]);
        assert_eq!(calls.cut, 3);
        let parts = calls.split(9, 1_000_000);
        assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), 1_000_000, "the paths kept take it all");
    }
}
