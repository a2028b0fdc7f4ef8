use cutr_format::ActivityEncoder;
use cutr_format::synth::{Synth, SynthOptions};
fn main() {
    let n: u64 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(1_000_000);
    let mut s = Synth::new(SynthOptions { records: n, ..Default::default() }).unwrap();
    let mut enc = ActivityEncoder::new(s.layouts(), 3);
    let mut raw = 0;
    let mut ours = 0;
    let mut z = 0;
    while let Some(b) = s.next_buffer() {
        raw += b.bytes.len();
        ours += enc.encode(&b.bytes).payload.len();
        z += zstd::bulk::compress(&b.bytes, 3).unwrap().len();
    }
    let r = s.truth().records as f64;
    println!(
        "records {} raw {} B/rec {:.1} | zstd3 {:.2} B/rec | ours {:.2} B/rec | ratio {:.2}",
        r,
        raw,
        raw as f64 / r,
        z as f64 / r,
        ours as f64 / r,
        z as f64 / ours as f64
    );
}
