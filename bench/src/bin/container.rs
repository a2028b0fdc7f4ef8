//! Container benchmark: size and speed of the record-aware codec against plain zstd on the same raw CUPTI
//! buffers (docs/BENCHMARKS.md, "Container").
//!
//! - size: bytes per record of our chunks vs zstd level 3 of each buffer, and vs zstd-3 of all buffers as one
//!   stream, on (a) launch-only records (per launch: external correlation + runtime API + kernel) and (b) the full
//!   synthetic training loop;
//! - writer throughput on one core: records/s of our encoder vs zstd-3 compression of the same buffers;
//! - reader throughput on all cores: decode + iterate every record (sum kernel durations) vs zstd decompression +
//!   the same iteration over raw records.
//!
//! A and B run interleaved, `--reps` times, and medians are reported.

use anyhow::Result;
use clap::Parser;
use cutr_bench::interleaved_medians;
use cutr_format::codec::{self, CodecPlan, Encoder};
use cutr_schema::kinds;
use cutr_synth::{Synth, SynthOptions};
use rayon::prelude::*;

#[derive(Parser)]
struct Args {
    /// Records per trace.
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Bytes per CUPTI buffer (one chunk each).
    #[arg(long, default_value_t = 4 << 20)]
    buffer_bytes: usize,
}

struct Trace {
    name: &'static str,
    buffers: Vec<Vec<u8>>,
    records: u64,
    plan: CodecPlan,
    kernel_start: usize,
    kernel_end: usize,
}

fn trace(name: &'static str, args: &Args, launches_only: bool) -> Trace {
    let mut s = Synth::new(SynthOptions {
        records: args.records,
        buffer_bytes: args.buffer_bytes,
        launches_only,
        ..Default::default()
    })
    .unwrap();
    let mut buffers = Vec::new();
    while let Some(b) = s.next_buffer() {
        buffers.push(b.bytes);
    }
    let k = s.layouts().get(kinds::CONCURRENT_KERNEL).unwrap();
    Trace {
        name,
        records: s.truth().records,
        plan: CodecPlan::new(s.layouts()),
        kernel_start: k.offset("start").unwrap(),
        kernel_end: k.offset("end").unwrap(),
        buffers,
    }
}

fn kernel_ns(g: &codec::RecordGroup, s: usize, e: usize) -> u64 {
    g.iter()
        .map(|r| {
            let start = u64::from_le_bytes(r[s..s + 8].try_into().unwrap());
            let end = u64::from_le_bytes(r[e..e + 8].try_into().unwrap());
            end.wrapping_sub(start)
        })
        .sum()
}

fn main() -> Result<()> {
    let args = Args::parse();
    println!(
        "# container benchmark: {} records per trace, {} B buffers, {} reps, {} threads for reading",
        args.records,
        args.buffer_bytes,
        args.reps,
        rayon::current_num_threads()
    );
    for t in [trace("launch-only loop", &args, true), trace("training loop (mixed kinds)", &args, false)] {
        let raw: usize = t.buffers.iter().map(Vec::len).sum();
        let ours: Vec<Vec<u8>> = {
            let mut e = Encoder::new(3);
            t.buffers.iter().map(|b| e.encode(b, &t.plan).0).collect()
        };
        let zstd_chunks: Vec<Vec<u8>> = t.buffers.iter().map(|b| zstd::bulk::compress(b, 3).unwrap()).collect();
        let whole = zstd::stream::encode_all(t.buffers.concat().as_slice(), 3)?;
        let ours_b: usize = ours.iter().map(Vec::len).sum();
        let zc_b: usize = zstd_chunks.iter().map(Vec::len).sum();
        let n = t.records as f64;
        println!(
            "\n## {} ({} records, {} buffers, {:.1} raw B/record)",
            t.name,
            t.records,
            t.buffers.len(),
            raw as f64 / n
        );
        println!(
            "size: ours {:.2} B/record | zstd-3 per buffer {:.2} B/record ({:.2}x ours) | zstd-3 whole stream {:.2} B/record ({:.2}x ours)",
            ours_b as f64 / n,
            zc_b as f64 / n,
            zc_b as f64 / ours_b as f64,
            whole.len() as f64 / n,
            whole.len() as f64 / ours_b as f64
        );

        // Writer: one core.
        let mut enc = Encoder::new(3);
        let mut zc = zstd::bulk::Compressor::new(3)?;
        let (mut sink_a, mut sink_b) = (0usize, 0usize);
        let w = interleaved_medians(
            args.reps,
            &mut [
                &mut || {
                    for b in &t.buffers {
                        sink_a += enc.encode(b, &t.plan).0.len();
                    }
                },
                &mut || {
                    for b in &t.buffers {
                        sink_b += zc.compress(b).unwrap().len();
                    }
                },
            ],
        );
        println!(
            "write (1 core): ours {:.1} M records/s ({:.0} MB/s raw) | zstd-3 {:.1} M records/s | ours/zstd time ratio {:.2}",
            n / w[0] / 1e6,
            raw as f64 / w[0] / 1e6,
            n / w[1] / 1e6,
            w[0] / w[1]
        );

        // Reader: all cores, decompress + iterate kernels.
        let (ks, ke) = (t.kernel_start, t.kernel_end);
        let lens: Vec<u64> = t.buffers.iter().map(|b| b.len() as u64).collect();
        let (mut check_a, mut check_b) = (0u64, 0u64);
        let r = interleaved_medians(
            args.reps,
            &mut [
                &mut || {
                    check_a = ours
                        .par_iter()
                        .zip(&lens)
                        .map(|(p, &len)| {
                            let d = codec::decode(p, len).unwrap();
                            d.group(kinds::CONCURRENT_KERNEL).map(|g| kernel_ns(g, ks, ke)).unwrap_or(0)
                        })
                        .sum();
                },
                &mut || {
                    check_b = zstd_chunks
                        .par_iter()
                        .zip(&lens)
                        .map(|(p, &len)| {
                            let raw = zstd::bulk::decompress(p, len as usize).unwrap();
                            let d = codec::group_raw(&raw, &t.plan);
                            d.group(kinds::CONCURRENT_KERNEL).map(|g| kernel_ns(g, ks, ke)).unwrap_or(0)
                        })
                        .sum();
                },
            ],
        );
        assert_eq!(check_a, check_b, "both readers must see the same kernel time");
        println!(
            "read ({} threads, decode + iterate): ours {:.1} M records/s | zstd-3 + walk {:.1} M records/s | ours/zstd time ratio {:.2}",
            rayon::current_num_threads(),
            n / r[0] / 1e6,
            n / r[1] / 1e6,
            r[0] / r[1]
        );
        std::hint::black_box((sink_a, sink_b));
    }
    Ok(())
}
