//! `source --diff` on the H100 fixtures of `calls_workload`'s kernel `lines` (fixtures/source_diff): six runs of
//! one binary (A/A) and three of the build with one more dependent load at calls_workload.cu:64 (A/B); and on
//! small hand-made counts, where the answer is "too few samples".

use std::path::PathBuf;

use cutr_analyses::source::{KernelLines, KernelSource, LineRow, SourceInput, SourceReport};
use cutr_analyses::source_diff::{Change, KernelDiff, SourceDiff, SourceDiffOptions, Verdict, compare, side_report};
use cutr_format::Reader;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/source_diff").join(name)
}

fn report(names: &[String]) -> SourceReport {
    let readers: Vec<Reader> = names.iter().map(|n| Reader::open(&fixture(n)).unwrap()).collect();
    let refs: Vec<&Reader> = readers.iter().collect();
    side_report(&refs, None)
}

fn diff_of(base: &[String], new: &[String]) -> SourceDiff {
    compare(&report(base), &report(new), &SourceDiffOptions::default()).unwrap()
}

fn one(name: &str) -> Vec<String> {
    vec![format!("{name}.cutr")]
}

const KERNEL: &str = "lines(unsigned int const*, float const*, int, float*)";

fn the_kernel(d: &SourceDiff) -> &KernelDiff {
    assert_eq!(d.kernels.len(), 1);
    assert_eq!(d.kernels[0].name, KERNEL);
    &d.kernels[0]
}

/// A line's verdict, its change (pp, to 0.0001) and the stall reason that moved it most in its direction.
fn line(k: &KernelDiff, n: u32) -> (Change, f64, Option<(String, Change, f64)>) {
    let l = k.lines.iter().find(|l| l.line == n).unwrap_or_else(|| panic!("no line {n}"));
    let round = |x: f64| (x * 1e4).round() / 1e4;
    let stall = cutr_analyses::source_diff::moved_most(&l.stalls, l.share.change)
        .map(|r| (r.reason.clone(), r.share.change, round(r.share.change_pp)));
    (l.share.change, round(l.share.change_pp), stall)
}

/// base-1 against extra-1: the extra load's line is new and holds 85.72% of the samples, long_scoreboard the
/// reason that grew; the chase's line drops from 92.95% to 1.28% (its latency now stalls the new consumer, line
/// 64); the FMA line grows by 5.79 pp; the lines whose samples stay tiny are unchanged.
#[test]
fn the_extra_load_is_named_with_the_stall_that_grew() {
    let d = diff_of(&one("base-1"), &one("extra-1"));
    assert_eq!(d.verdict, Verdict::Grew);
    let k = the_kernel(&d);
    assert_eq!((k.base_samples, k.new_samples), (11_441_193, 10_808_559));
    assert_eq!(
        (k.base_cubins.as_slice(), k.new_cubins.as_slice(), k.same_cubin),
        (&[0x3617_5233][..], &[0x423b_02f0][..], false)
    );
    assert!(k.pcs.is_empty(), "different cubins: no SASS offsets compared");
    let l64 = k.lines.iter().find(|l| l.line == 64).unwrap();
    assert_eq!(
        (l64.location.as_str(), l64.share.base_samples, l64.share.new_samples),
        ("calls_workload.cu:64", 0, 9_265_388)
    );
    assert_eq!(line(k, 64), (Change::Grew, 85.7227, Some(("long_scoreboard".into(), Change::Grew, 83.9064))));
    assert_eq!(line(k, 61), (Change::Dropped, -91.6635, Some(("long_scoreboard".into(), Change::Dropped, -92.1454))));
    assert_eq!(line(k, 62), (Change::Grew, 5.7933, Some(("long_scoreboard".into(), Change::Grew, 5.7635))));
    // Line 60 moves by 0.14 pp: beyond noise with 11M samples, but within the 1 pp threshold.
    assert_eq!(line(k, 60).0, Change::Unchanged);
    assert!(line(k, 60).1 > 0.14 && line(k, 60).1 < 0.15);
    for n in [56, 57, 67, 68] {
        assert_eq!(line(k, n).0, Change::Unchanged, "line {n}");
        assert!(line(k, n).1.abs() < 0.002, "line {n}: {:?}", line(k, n));
    }
    // Lines first by the size of their change; the kernel's own stall mix moved by 2.48 pp.
    let order: Vec<u32> = k.lines.iter().map(|l| l.line).collect();
    assert_eq!(order, [61, 64, 62, 60, 57, 67, 68, 56]);
    assert!((k.stall_mix_moved_pp - 2.4762).abs() < 1e-4, "{}", k.stall_mix_moved_pp);
    assert!((k.line_mix_moved_pp - 91.6635).abs() < 1e-4, "{}", k.line_mix_moved_pp);
    // Holm's family: the kernel's 9 stall reasons, its 8 lines and their 33 line x reason cells (no offsets).
    assert_eq!(d.tests, 50);
    assert!((d.z_critical - 3.7190).abs() < 1e-4, "{}", d.z_critical);
}

/// The JSON a script reads: the verdict, the test and its family, and per line its shares, change and verdict.
#[test]
fn json_names_every_figure() {
    let d = diff_of(&one("base-1"), &one("extra-1"));
    let j = serde_json::to_value(&d).unwrap();
    assert_eq!(j["verdict"], "grew");
    assert_eq!(j["threshold_pp"], 1.0);
    assert_eq!(j["confidence_pct"], 99.0);
    assert_eq!(j["test"], "two-proportion z test per row (pooled), Holm-corrected over every row");
    assert_eq!(j["tests"], 50);
    let k = &j["kernels"][0];
    assert_eq!(k["name"], KERNEL);
    assert_eq!(k["same_cubin"], false);
    assert_eq!(k["base_cubins"], serde_json::json!([907_498_035u64]));
    let l = k["lines"].as_array().unwrap().iter().find(|l| l["line"] == 64).unwrap();
    assert_eq!(l["location"], "calls_workload.cu:64");
    assert_eq!(l["file"], "calls_workload.cu");
    assert_eq!((l["base_samples"].as_u64(), l["new_samples"].as_u64()), (Some(0), Some(9_265_388)));
    assert_eq!(l["base_pct"], 0.0);
    assert!((l["new_pct"].as_f64().unwrap() - 85.7227).abs() < 1e-4);
    assert!((l["change_pp"].as_f64().unwrap() - 85.7227).abs() < 1e-4);
    assert_eq!(l["p_adjusted"], 0.0);
    assert_eq!(l["change"], "grew");
    let s = &l["stalls"][0];
    assert_eq!((s["reason"].as_str(), s["change"].as_str()), (Some("long_scoreboard"), Some("grew")));
    assert_eq!((s["base_samples"].as_u64(), s["new_samples"].as_u64()), (Some(0), Some(9_069_073)));
}

/// Every A/A pair of the six base runs (15 pairs): no row of any kind beyond noise (so no line grew or dropped:
/// verdict unchanged), and the SASS offsets compared (one cubin by CRC), 317 of them.
#[test]
fn a_a_pairs_find_no_line_beyond_noise() {
    let (mut pairs, mut largest) = (0, 0.0f64);
    for i in 1..=6 {
        for j in i + 1..=6 {
            let d = diff_of(&one(&format!("base-{i}")), &one(&format!("base-{j}")));
            assert_eq!(d.verdict, Verdict::Unchanged, "base-{i} vs base-{j}");
            let k = the_kernel(&d);
            assert!(k.same_cubin);
            assert_eq!(k.pcs.len(), 317, "base-{i} vs base-{j}");
            let lines = k.lines.iter().map(|l| &l.share);
            let pcs = k.pcs.iter().map(|p| &p.share);
            let stalls = k.lines.iter().flat_map(|l| l.stalls.iter().map(|r| &r.share));
            for s in lines.chain(pcs).chain(stalls) {
                assert_eq!(s.change, Change::Unchanged, "base-{i} vs base-{j}: {s:?}");
                assert!(s.p_adjusted >= 0.01, "base-{i} vs base-{j}: {s:?}");
                largest = largest.max(s.change_pp.abs());
            }
            pairs += 1;
        }
    }
    assert_eq!(pairs, 15);
    // The largest change of any line, offset or line x reason share over the 15 pairs: 0.0207 pp (line 61's
    // long_scoreboard, base-1 vs base-4), 48 times under the default threshold.
    assert_eq!((largest * 1e4).round() / 1e4, 0.0207);
}

/// Every base x extra pair (18): line 64 grew with long_scoreboard, line 61 dropped, the tiny lines unchanged;
/// and several runs a side (their samples added) say the same.
#[test]
fn every_a_b_pair_names_line_64() {
    let mut pairs = 0;
    for i in 1..=6 {
        for j in 1..=3 {
            let d = diff_of(&one(&format!("base-{i}")), &one(&format!("extra-{j}")));
            assert_eq!(d.verdict, Verdict::Grew);
            let k = the_kernel(&d);
            let (change, pp, stall) = line(k, 64);
            assert_eq!(
                (change, stall.map(|s| (s.0, s.1))),
                (Change::Grew, Some(("long_scoreboard".into(), Change::Grew)))
            );
            assert!(pp > 85.7 && pp < 85.73, "base-{i} extra-{j}: {pp}");
            assert_eq!(line(k, 61).0, Change::Dropped);
            assert_eq!(k.lines[1].line, 64, "the largest growth, second to the chase's drop");
            for n in [56, 57, 60, 67, 68] {
                assert_eq!(line(k, n).0, Change::Unchanged, "base-{i} extra-{j} line {n}");
            }
            pairs += 1;
        }
    }
    assert_eq!(pairs, 18);
    let base: Vec<String> = (1..=6).map(|i| format!("base-{i}.cutr")).collect();
    let extra: Vec<String> = (1..=3).map(|i| format!("extra-{i}.cutr")).collect();
    let d = diff_of(&base, &extra);
    let k = the_kernel(&d);
    assert_eq!((k.base_samples, k.new_samples), (68_646_894, 32_424_912));
    assert_eq!(line(k, 64).0, Change::Grew);
}

/// A kernel of a few hundred samples a side cannot show a 1 pp change of a line: "too few samples", never
/// "unchanged"; a large change in as few samples is still found.
#[test]
fn small_counts_are_too_few_samples() {
    let side = |name: &str, lines: &[(u32, u64)]| -> SourceReport {
        let samples = lines.iter().map(|l| l.1).sum();
        let rows = lines
            .iter()
            .map(|&(line, n)| LineRow {
                file: "k.cu".into(),
                dir: String::new(),
                line,
                samples: n,
                percent: 0.0,
                stalls: vec![("long_scoreboard".into(), n)],
                inlined_at: Vec::new(),
                function: "k".into(),
                called_from: Vec::new(),
            })
            .collect();
        let mut report = SourceReport::default();
        report.files = vec![name.into()];
        report.samples = samples;
        report.kernels = vec![KernelSource {
            name: "k".into(),
            mangled: "k".into(),
            cubin_crc: 1,
            samples,
            percent: 100.0,
            stalls: vec![("long_scoreboard".into(), samples)],
            has_lines: true,
            line_tables: KernelLines::Present,
            lines: rows,
            pcs: Vec::new(),
            functions: Vec::new(),
            call_sites_unknown: None,
            uncharged_samples: 0,
        }];
        report.inputs = vec![SourceInput { collections: 1, ..Default::default() }];
        report
    };
    // 300 samples a side: line 2 moves 1.67 pp (5 -> 10 of 300), line 3 moves 40 pp (150 -> 30).
    let b = side("b.cutr", &[(1, 145), (2, 5), (3, 150)]);
    let n = side("n.cutr", &[(1, 260), (2, 10), (3, 30)]);
    let d = compare(&b, &n, &SourceDiffOptions::default()).unwrap();
    let k = &d.kernels[0];
    let by_line = |n: u32| k.lines.iter().find(|l| l.line == n).unwrap().share.change;
    assert_eq!((by_line(1), by_line(2), by_line(3)), (Change::Grew, Change::TooFewSamples, Change::Dropped));
    assert_eq!(d.verdict, Verdict::Grew);
    // The same counts times 10,000: line 2's 1.67 pp is now beyond noise and the threshold.
    let scale = |r: &[(u32, u64)]| -> Vec<(u32, u64)> { r.iter().map(|&(l, n)| (l, n * 10_000)).collect() };
    let b = side("b.cutr", &scale(&[(1, 145), (2, 5), (3, 150)]));
    let n = side("n.cutr", &scale(&[(1, 260), (2, 10), (3, 30)]));
    let d = compare(&b, &n, &SourceDiffOptions::default()).unwrap();
    assert_eq!(d.kernels[0].lines.iter().find(|l| l.line == 2).unwrap().share.change, Change::Grew);
}

/// A side without PC samples is an error naming its file; no kernel on both sides is "different programs".
#[test]
fn a_side_without_samples_is_named() {
    let b = report(&one("base-1"));
    let mut n = b.clone();
    n.files = vec!["plain.cutr".into()];
    n.inputs = vec![SourceInput::default()];
    let e = compare(&b, &n, &SourceDiffOptions::default()).unwrap_err();
    assert_eq!(e.to_string(), "plain.cutr: no PC samples to compare: record it with `cupti-record --pc-sampling`");
    // Collections read, but every sample lost: named, not "different programs".
    let mut lost = b.clone();
    lost.files = vec!["cut.cutr".into()];
    lost.kernels.clear();
    let e = compare(&b, &lost, &SourceDiffOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cut.cutr: no PC sample left to compare: every one was lost or left out (the warnings say why)"
    );
    let mut other = b.clone();
    other.kernels[0].name = "another(int)".into();
    let d = compare(&b, &other, &SourceDiffOptions::default()).unwrap();
    assert_eq!(d.verdict, Verdict::DifferentPrograms);
    assert_eq!(
        (d.base_only.as_slice(), d.new_only.as_slice()),
        (&[KERNEL.to_string()][..], &["another(int)".to_string()][..])
    );
}

/// A kernel whose cubin has no line tables (built without -lineinfo) is judged by SASS offset when both sides ran
/// the same cubin: an offset that grew fails the comparison; with different cubins nothing is judged, and the
/// notes say why.
#[test]
fn a_kernel_without_lines_is_judged_by_offset() {
    use cutr_analyses::source::PcRow;
    let side = |crc: u64, pcs: &[(u64, u64)]| -> SourceReport {
        let samples = pcs.iter().map(|p| p.1).sum();
        let rows = pcs
            .iter()
            .map(|&(pc_offset, n)| PcRow {
                pc_offset,
                location: String::new(),
                samples: n,
                percent: 0.0,
                stalls: vec![("wait".into(), n)],
                sass: String::new(),
                function: "gemm".into(),
            })
            .collect();
        let mut report = SourceReport::default();
        report.files = vec!["x.cutr".into()];
        report.samples = samples;
        report.kernels = vec![KernelSource {
            name: "gemm".into(),
            mangled: "gemm".into(),
            cubin_crc: crc,
            samples,
            percent: 100.0,
            stalls: vec![("wait".into(), samples)],
            has_lines: false,
            line_tables: KernelLines::Absent,
            lines: Vec::new(),
            pcs: rows,
            functions: Vec::new(),
            call_sites_unknown: None,
            uncharged_samples: 0,
        }];
        report.inputs = vec![SourceInput { collections: 1, ..Default::default() }];
        report
    };
    // +0x10 goes from 50% to 70% of 100,000 samples.
    let d = compare(
        &side(7, &[(0x10, 50_000), (0x20, 50_000)]),
        &side(7, &[(0x10, 70_000), (0x20, 30_000)]),
        &SourceDiffOptions::default(),
    )
    .unwrap();
    let k = &d.kernels[0];
    assert_eq!((d.verdict, k.same_cubin, k.lines.len(), k.pcs.len()), (Verdict::Grew, true, 0, 2));
    assert_eq!((k.pcs[0].pc_offset, k.pcs[0].share.change), (0x10, Change::Grew));
    assert_eq!(
        k.notes,
        [
            "base: its cubin has no line tables: build with -lineinfo for lines; offsets below",
            "new: its cubin has no line tables: build with -lineinfo for lines; offsets below"
        ]
    );
    let d = compare(
        &side(7, &[(0x10, 50_000), (0x20, 50_000)]),
        &side(8, &[(0x10, 70_000), (0x20, 30_000)]),
        &SourceDiffOptions::default(),
    )
    .unwrap();
    assert_eq!((d.verdict, d.kernels[0].pcs.len()), (Verdict::Unchanged, 0));
    assert_eq!(
        d.kernels[0].notes[0],
        "the sides ran different cubins (base 0x7, new 0x8) and neither has lines: nothing compared"
    );
}
