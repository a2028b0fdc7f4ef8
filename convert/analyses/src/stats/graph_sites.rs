//! Capture sites: the application function whose call made each CUDA graph node, named from the node's recorded
//! stack (return addresses, innermost first) with the host binaries' symbols (`cutr_source::host`, build id
//! checked), and the ops replayed from the nodes of each site (summed per node first:
//! [`super::graphs::node_sums`]).
//!
//! A creating call's stack starts in CUDA's code: libcupti (the callback), libcuda, the CUDA runtime (a library,
//! or linked into the program itself, nvcc's default, whose symbols are `libcudart_static_<hash>` and the `cuda*`
//! entry points) and nvcc's launch stubs (`__device_stub__*`, the `cudaLaunchKernel<T>` template). Those frames
//! are passed over: the first frame left is the application's.

use std::collections::BTreeMap;

use cutr_model::demangle::demangle;
use cutr_model::um_host::{HostLocation, host_location};
use cutr_model::{ProcId, Trace};
use cutr_source::host::HostSymbols;
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Files whose frames are CUDA's or the recorder's, by the start of their file name.
const NOT_APPLICATION: [&str; 4] = ["libcupti.", "libcuda.", "libcudart.", "libcutr_recorder"];
/// Callers named after the creating function: enough to tell apart the call paths into a shared helper.
const CALLERS: usize = 3;

/// Graph nodes and their replayed ops by the application function that made them, per capture range.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CaptureSite {
    /// The NVTX ranges open when the nodes were made (as `CaptureRange::path`).
    pub range: String,
    /// The innermost application function of the creating call's stack (demangled); empty when not named.
    pub function: String,
    /// Its callers, innermost first, as far as they are named (at most three).
    pub callers: Vec<String>,
    /// The file holding that frame and the return address's offset in it (of the site's first node): where to look
    /// when it is not named.
    pub file: String,
    pub offset: u64,
    /// Why the function has no name (`file not readable here`, `build id differs`...); `None` when named.
    pub unresolved: Option<&'static str>,
    pub nodes: u64,
    pub ops: u64,
    pub gpu_ns: u64,
}

/// What a frame is.
#[derive(Clone, Debug, PartialEq)]
enum Frame {
    /// CUDA's or the recorder's.
    Cuda,
    Named(String),
    Unnamed {
        file: String,
        offset: u64,
        why: &'static str,
    },
}

/// Whether a (demangled) function is the CUDA runtime linked into the program, or an nvcc launch stub.
fn cuda_function(name: &str) -> bool {
    let entry = name.strip_prefix("cuda").is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()));
    entry || ["libcudart_static_", "__cudart", "cudart::", "__device_stub__"].iter().any(|p| name.starts_with(p))
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Frames resolved once per (file, address), each file's symbols read once.
struct Resolver<'t> {
    t: &'t Trace,
    symbols: HostSymbols,
    seen: FxHashMap<(ProcId, u64, bool), Frame>,
}

impl Resolver<'_> {
    fn frame(&mut self, proc: ProcId, pc: u64, innermost: bool) -> Frame {
        let (t, symbols) = (self.t, &mut self.symbols);
        let resolve = || match host_location(t, proc, pc) {
            HostLocation::Mapped { mapping, offset } => {
                let name = file_name(&mapping.path);
                if NOT_APPLICATION.iter().any(|p| name.starts_with(p)) {
                    return Frame::Cuda;
                }
                // A return address is the instruction after the call, which may be the next function's first.
                let at = if innermost { offset } else { offset.saturating_sub(1) };
                match symbols.function(&mapping.path, &mapping.build_id, at) {
                    Ok(f) => {
                        let f = demangle(&f);
                        if cuda_function(&f) { Frame::Cuda } else { Frame::Named(f) }
                    }
                    Err(why) => Frame::Unnamed { file: name.to_string(), offset, why: why.as_str() },
                }
            }
            other => Frame::Unnamed { file: String::new(), offset: pc, why: other.unresolved().unwrap_or("") },
        };
        self.seen.entry((proc, pc, innermost)).or_insert_with(resolve).clone()
    }

    /// The site of a stack: its first application frame, and that frame's named callers. `None`: no such frame.
    fn site(&mut self, proc: ProcId, stack: &[u64]) -> Option<(Frame, Vec<String>)> {
        let mut frames = stack.iter().enumerate().map(|(i, &pc)| self.frame(proc, pc, i == 0));
        let top = frames.by_ref().find(|f| *f != Frame::Cuda)?;
        let mut callers = Vec::new();
        if matches!(top, Frame::Named(_)) {
            for f in frames {
                match f {
                    Frame::Named(n) if callers.len() < CALLERS => callers.push(n),
                    Frame::Cuda => {}
                    _ => break,
                }
            }
        }
        Some((top, callers))
    }
}

/// The capture sites of every node with a stack, with the ops replayed from them (`per_node`: each node's GPU
/// time and ops) (most GPU time first), and
/// whether any was named.
pub(super) fn sites(
    t: &Trace,
    node_paths: &[String],
    per_node: &[(u64, u64)],
    symbol_dirs: &[std::path::PathBuf],
) -> (Vec<CaptureSite>, bool) {
    let mut r = Resolver { t, symbols: HostSymbols::with_search_dirs(symbol_dirs.to_vec()), seen: Default::default() };
    // Named sites are one row per function and callers, whatever the call's offset; unnamed ones per address.
    type Key = (String, String, Vec<String>, String, u64);
    let mut rows: BTreeMap<Key, CaptureSite> = BTreeMap::new();
    let mut node_site: Vec<Option<Key>> = vec![None; t.graphs.nodes.len()];
    for (i, n) in t.graphs.nodes.iter().enumerate() {
        let Some((top, callers)) = r.site(n.proc, t.graphs.stack(n)) else { continue };
        let range = node_paths.get(i).cloned().unwrap_or_default();
        let (function, file, offset, unresolved) = match top {
            Frame::Named(f) => (f, String::new(), 0, None),
            Frame::Unnamed { file, offset, why } => (String::new(), file, offset, Some(why)),
            Frame::Cuda => continue,
        };
        let key: Key = (range.clone(), function.clone(), callers.clone(), file.clone(), offset);
        let row = rows.entry(key.clone()).or_insert_with(|| CaptureSite {
            range,
            function,
            callers,
            file,
            offset,
            unresolved,
            ..Default::default()
        });
        row.nodes += 1;
        node_site[i] = Some(key);
    }
    for (site, &(ns, ops)) in node_site.iter().zip(per_node) {
        if let Some(row) = site.as_ref().and_then(|k| rows.get_mut(k)) {
            row.ops += ops;
            row.gpu_ns = row.gpu_ns.saturating_add(ns);
        }
    }
    let mut out: Vec<CaptureSite> = rows.into_values().collect();
    out.sort_by(|a, b| {
        (b.gpu_ns, b.nodes)
            .cmp(&(a.gpu_ns, a.nodes))
            .then_with(|| (&a.range, &a.function).cmp(&(&b.range, &b.function)))
    });
    let named = out.iter().any(|s| s.unresolved.is_none());
    (out, named)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cuda_runtime_in_the_program_and_launch_stubs_are_not_the_application() {
        for f in [
            "cudaLaunchKernel",
            "cudaLaunchKernel<char>(char const*, dim3, dim3, void**, unsigned long, CUstream_st*)",
            "cudaMemsetAsync",
            "libcudart_static_4d8b33a106dceb3c07a56e26de61f2d53bb62a68",
            "__device_stub__Z13stacks_kernelPffPff(float*, float)",
            "cudart::cudaApiLaunchKernel",
        ] {
            assert!(cuda_function(f), "{f}");
        }
        for f in ["build_inner", "cuda", "cudamalloc_helper", "capture_chain(CUstream_st*, float*, float, int, bool)"] {
            assert!(!cuda_function(f), "{f}");
        }
    }
}
