//! The fuzz target's function (`cutr_tests::fuzz::read_everything`) over a fixed corpus and deterministic mutations
//! of it, on every test run: bit flips, overwritten bytes, cuts, repeated ranges, chunk headers rewritten with
//! hostile sizes, counts and sequence numbers, and the side chunks of formats 1.1-1.5 (cubins, PC samples, counter
//! samples, graph events, thread names, clocks) decoded with one field or one flatbuffer word made hostile (their
//! checksums recomputed). Longer runs use `cargo fuzz` (`fuzz/`, docs/BENCHMARKS.md "Fuzzing").

use cutr_format::container::ChunkType;
use cutr_synth::forge::counters::{HOSTILE_WORDS, overwrite_word, rewrite_payload};
use cutr_synth::forge::{Chunk, chunks, edit_header, fields};
use cutr_tests::fuzz::read_everything;

/// The corpus: small real recordings of each shape (a CUDA program, the regression pair, two ranks, PC samples
/// with their cubins and thread names, CUDA graphs' events, unified memory), a generated one with every record
/// kind, and one with counter samples.
fn corpus() -> Vec<Vec<u8>> {
    let root = cutr_tests::repo().join("fixtures");
    let mut out: Vec<Vec<u8>> = [
        "cuda_workload.cutr",
        "regress/base_a.cutr",
        "allreduce/allreduce-589.cutr",
        "source_workload_pcs.cutr",
        "graph_workload.cutr",
        "um_workload.cutr",
    ]
    .iter()
    .map(|f| std::fs::read(root.join(f)).unwrap())
    .collect();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("g.cutr");
    cutr_synth::write_file(
        &p,
        cutr_synth::SynthOptions { records: 3_000, buffer_bytes: 64 << 10, ..Default::default() },
    )
    .unwrap();
    out.push(std::fs::read(&p).unwrap());
    // And one with a counters chunk (format 1.3).
    let p = dir.path().join("c.cutr");
    let w = cutr_format::Writer::create(&p, cutr_format::WriterOptions::default()).unwrap();
    let c = cutr_format::CounterSamples {
        source: "nvml".into(),
        device: 0,
        metrics: vec![cutr_format::CounterMetric {
            name: "power".into(),
            unit: "W".into(),
            description: String::new(),
        }],
        t_start: (0..200u64).map(|i| i * 1_000_000).collect(),
        t_end: (0..200u64).map(|i| i * 1_000_000).collect(),
        values: (0..200).map(f64::from).collect(),
        lost_samples: 0,
    };
    let opts = cutr_synth::SynthOptions { records: 2_000, buffer_bytes: 64 << 10, ..Default::default() };
    cutr_synth::write_to_with(w, opts, |w, _| w.write_counters(&c).map(|_| ())).unwrap();
    out.push(std::fs::read(&p).unwrap());
    out
}

/// The seeds of the side-chunk replay: the smallest files holding each kind (cubins, PC samples and thread names;
/// graph events; counter samples, generated).
fn side_corpus() -> Vec<Vec<u8>> {
    let root = cutr_tests::repo().join("fixtures");
    let mut out: Vec<Vec<u8>> = ["source_workload_pcs.cutr", "graph_workload.cutr"]
        .iter()
        .map(|f| std::fs::read(root.join(f)).unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.cutr");
    let opts = cutr_synth::SynthOptions { records: 500, buffer_bytes: 16 << 10, ..Default::default() };
    cutr_synth::forge::counters::write_with_counters(&p, opts, |t| {
        vec![cutr_synth::forge::counters::metric_flood((t.t_min, t.t_max), 3, 40, 0, |j, i| (i * 10 + j) as f64)]
    })
    .unwrap();
    out.push(std::fs::read(&p).unwrap());
    out
}

/// SplitMix64: the same mutations on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The side chunks of `b` a field or word mutation aims at.
fn side_chunks(b: &[u8]) -> Vec<Chunk> {
    let aimed = |t: ChunkType| {
        matches!(
            t,
            ChunkType::Blob
                | ChunkType::PcSamples
                | ChunkType::Counters
                | ChunkType::Graphs
                | ChunkType::Threads
                | ChunkType::Clocks
        )
    };
    // Only chunks whose claimed span lies inside the file (an earlier mutation may have made it lie).
    let inside = |c: &Chunk| (c.offset as u64).checked_add(c.header.span()).is_some_and(|end| end <= b.len() as u64);
    chunks(b).into_iter().filter(|c| aimed(c.header.chunk_type) && inside(c)).collect()
}

/// A side chunk of `b` with one field (a valid flatbuffer still) or one 4-byte word of its flatbuffer made hostile.
fn mutate_side_chunk(b: &mut Vec<u8>, rng: &mut Rng) {
    let cs = side_chunks(b);
    if cs.is_empty() {
        return;
    }
    let c = cs[rng.below(cs.len())];
    let (pick, at) = (rng.next(), rng.next() as usize);
    let word = if rng.below(2) == 0 { HOSTILE_WORDS[rng.below(HOSTILE_WORDS.len())] } else { rng.next() as u32 };
    let by_field = rng.below(3) > 0;
    *b = rewrite_payload(b, &c, |raw| match fields::hostile_field(c.header.chunk_type, raw, pick) {
        Some(hostile) if by_field => *raw = hostile,
        _ => {
            let len = raw.len();
            overwrite_word(raw, at % len.max(1), word);
        }
    });
}

/// One mutation of `b`.
fn mutate(b: &mut Vec<u8>, rng: &mut Rng) {
    match rng.below(6) {
        0 => {
            let i = rng.below(b.len());
            b[i] ^= 1 << rng.below(8);
        }
        1 => {
            let i = rng.below(b.len());
            let n = rng.below(64).min(b.len() - i);
            for x in &mut b[i..i + n] {
                *x = rng.next() as u8;
            }
        }
        2 => {
            let n = rng.below(b.len());
            b.truncate(n.max(1));
        }
        3 => {
            let i = rng.below(b.len());
            let n = rng.below(4096).min(b.len() - i);
            let copy = b[i..i + n].to_vec();
            let at = rng.below(b.len());
            b.splice(at..at, copy);
        }
        _ => {
            let cs = chunks(b);
            if cs.is_empty() {
                return;
            }
            let c = cs[rng.below(cs.len())];
            let v = rng.next();
            let field = rng.below(5);
            edit_header(b, c.offset, |h| match field {
                0 => h.raw_len = v >> rng.below(64),
                1 => h.record_count = v as u32,
                2 => h.stored_len = v >> rng.below(64),
                3 => h.seq = (v % 8) as u32,
                _ => h.t_max = v,
            });
        }
    }
}

#[test]
fn the_reader_and_everything_after_it_survive_mutated_recordings() {
    let corpus = corpus();
    for seed in &corpus {
        read_everything(seed);
    }
    // CUTR_FUZZ_ITERATIONS and CUTR_FUZZ_SEED run it longer or elsewhere by hand. 800 (was 2,000): each file
    // that loads now also writes the Parquet tables (a file costs 2.7x what it did), and the side-chunk replay
    // below runs beside this one.
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let mut rng = Rng(env("CUTR_FUZZ_SEED", 0x5eed));
    let iterations = env("CUTR_FUZZ_ITERATIONS", 800) as usize;
    for i in 0..iterations {
        let mut b = corpus[i % corpus.len()].clone();
        for _ in 0..1 + rng.below(4) {
            if b.is_empty() {
                break;
            }
            mutate(&mut b, &mut rng);
        }
        read_everything(&b);
    }
}

/// The side chunks of formats 1.1-1.5 mutated where byte-level mutation rarely reaches: a field of a decoded
/// cubin, PC-sample, counters or graphs chunk set to a hostile value (a valid flatbuffer still), or one word of
/// any side chunk's flatbuffer (offsets, lengths, scalars) overwritten, checksums recomputed, once or twice per
/// file; each through everything that reads a recording, `source` and the Parquet export included. Every such
/// file loads, so each costs a whole read: 240 by default (`CUTR_FUZZ_SIDE_ITERATIONS` runs more).
#[test]
fn mutated_side_chunks_survive_everything_that_reads_them() {
    let corpus = side_corpus();
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let mut rng = Rng(env("CUTR_FUZZ_SEED", 0x51de));
    for i in 0..env("CUTR_FUZZ_SIDE_ITERATIONS", 240) as usize {
        let mut b = corpus[i % corpus.len()].clone();
        for _ in 0..1 + rng.below(2) {
            mutate_side_chunk(&mut b, &mut rng);
        }
        read_everything(&b);
    }
}

/// Cubins are read from files anyone can forge: 3,000 deterministic mutations of the two `-lineinfo` cubin fixtures
/// (bit flips, overwritten runs, cuts) through `SourceMap::from_cubin` and `locate` at every 16th offset of every
/// function: an error or a map, never a panic.
#[test]
fn mutated_cubins_never_panic_the_source_map() {
    let root = cutr_tests::repo().join("fixtures/cubins");
    let cubins: Vec<Vec<u8>> = ["source_workload.sm_90.cubin", "inline.sm_90.cubin"]
        .iter()
        .map(|f| std::fs::read(root.join(f)).unwrap())
        .collect();
    let mut rng = Rng(0xc0b1);
    let (mut ok, mut refused) = (0, 0);
    for i in 0..3_000 {
        let mut b = cubins[i % cubins.len()].clone();
        for _ in 0..1 + rng.below(4) {
            match rng.below(3) {
                0 => {
                    let at = rng.below(b.len());
                    b[at] ^= 1 << rng.below(8);
                }
                1 => {
                    let at = rng.below(b.len());
                    let n = rng.below(32).min(b.len() - at);
                    for x in &mut b[at..at + n] {
                        *x = rng.next() as u8;
                    }
                }
                _ => b.truncate(rng.below(b.len()).max(1)),
            }
        }
        match cutr_source::SourceMap::from_cubin(&b) {
            Ok(m) => {
                ok += 1;
                for f in m.functions() {
                    for pc in (0..f.size.min(4096)).step_by(16) {
                        let _ = m.locate(&f.name, pc);
                    }
                }
            }
            Err(_) => refused += 1,
        }
    }
    assert_eq!(ok + refused, 3_000);
    assert!(ok > 0 && refused > 0, "both outcomes exercised: {ok} read, {refused} refused");
}
