//! `cupti-convert stats --nvtx-names`: numbered NVTX names folded into one row past 64 a family by default, and
//! every name its own row with `each`, as the report was before folding.

mod common;

use common::{path_str, run, text};

#[test]
fn steps_fold_into_one_row_and_each_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g.cutr");
    assert!(run(&["generate", "-o", path_str(&g), "--records", "20000"]).status.success());
    let csv = |extra: &[&str]| {
        let mut args = vec!["stats", "--report", "nvtx", "--csv"];
        args.extend(extra);
        args.push(path_str(&g));
        let o = run(&args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    let folded = csv(&[]);
    let rows: Vec<&str> = folded.lines().skip(1).collect();
    assert_eq!(
        rows,
        [
            "nvtx,step <n>,180,89648015,79.578,498044.5,495442.0,471570,544090,10984.8,,,57457438,5806,66085431",
            "nvtx,forward,180,12362620,10.974,68681.2,68621.5,60984,77190,3425.0,,,19055055,2520,22314370",
            "nvtx,backward,180,10643467,9.448,59130.4,59218.5,48223,67584,3150.0,,,23744616,2160,26507337",
        ]
    );
    // `each`: the 180 steps one by one (one range each), adding up to the folded row; forward and backward alike.
    let each = csv(&["--nvtx-names", "each"]);
    let steps: Vec<Vec<&str>> =
        each.lines().filter(|l| l.starts_with("nvtx,step ")).map(|l| l.split(',').collect()).collect();
    let sum = |col: usize| steps.iter().map(|r| r[col].parse::<u64>().unwrap()).sum::<u64>();
    let min = steps.iter().map(|r| r[7].parse::<u64>().unwrap()).min();
    let max = steps.iter().map(|r| r[8].parse::<u64>().unwrap()).max();
    assert_eq!((steps.len(), sum(2), sum(3), min, max), (180, 180, 89_648_015, Some(471_570), Some(544_090)));
    assert_eq!((sum(12), sum(13), sum(14)), (57_457_438, 5806, 66_085_431));
    assert!(each.contains(rows[1]) && each.contains(rows[2]), "{each}");
    // The text report says what the folded row holds.
    let o = run(&["stats", "--report", "nvtx", "--wide", path_str(&g)]);
    let t = text(&o.stdout);
    assert!(
        t.contains("\n  Numbered names folded (more than 64 in a family; --nvtx-names each lists them): step <n> holds 180 names\n"),
        "{t}"
    );
}
