//! A user's own analysis over the public model: the GPU time of each kernel, and of the work launched inside each
//! NVTX range, from one recording.
//!
//!     cargo run --release -p cutr-model --example gpu_time -- fixtures/pytorch_loop.cutr

use std::collections::BTreeMap;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: gpu_time RECORDING.cutr")?;
    let trace = cutr_model::load(&[path.into()], &cutr_model::LoadOptions::default())?;

    // Kernels by demangled name: (launches, ns).
    let mut kernels: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for k in &trace.kernels {
        let e = kernels.entry(trace.kernel_name(k)).or_default();
        *e = (e.0 + 1, e.1 + k.duration());
    }
    let mut by_time: Vec<_> = kernels.into_iter().collect();
    by_time.sort_by_key(|(_, (_, ns))| std::cmp::Reverse(*ns));
    for (name, (n, ns)) in by_time.iter().take(5) {
        println!("{ns:>12} ns {n:>6} x  {name}");
    }

    // NVTX ranges by the GPU time of the work their API calls launched (nested ranges included).
    let mut ranges: BTreeMap<&str, u64> = BTreeMap::new();
    for (r, (ns, _)) in trace.ranges.iter().zip(trace.gpu_work_by_range()) {
        *ranges.entry(trace.names.get(r.name)).or_default() += ns;
    }
    for (name, ns) in ranges.iter().filter(|(_, ns)| **ns > 0) {
        println!("{ns:>12} ns of GPU work inside '{name}'");
    }
    println!("{} GPU records had no launching API call", trace.stats.gpu_without_api);
    Ok(())
}
