//! `kernel_stalls`: each hot kernel's top stall reason and hottest line from its PC samples. It reads what the
//! `source` analysis attached to the trace ([`crate::source::annotate`]: per recorded kernel name its samples,
//! top lines and top stall reasons with their shares of the kernel's samples), so the figures are `source`'s.

use cutr_model::{KernelSourceNote, Trace};

use super::super::super::types::{Finding, Outcome, RuleResult};
use super::hot::{HotKernel, Windows, short_name};

pub const RULE: &str = "kernel_stalls";

/// The first entry of one of `source`'s lists (`long_scoreboard 92.1%, selected 3.0%`): its label and share (%).
pub fn first_entry(list: &str) -> Option<(&str, f64)> {
    let first = list.find("%, ").map_or(list, |end| &list[..=end]);
    let (label, pct) = first.rsplit_once(' ')?;
    Some((label, pct.strip_suffix('%')?.parse().ok()?))
}

/// The note of the recorded name with the most samples among a hot kernel's executions.
fn note<'t>(t: &'t Trace, h: &HotKernel) -> Option<&'t KernelSourceNote> {
    let names = h.tally.recorded();
    names.iter().filter_map(|n| t.kernel_source.get(n)).filter(|n| n.samples > 0).max_by_key(|n| n.samples)
}

/// A finding per hot kernel with PC samples; without any, why not.
pub fn rule(t: &Trace, hot: &[HotKernel], w: &Windows) -> Vec<RuleResult> {
    let cannot = |why: String| vec![RuleResult { rule: RULE, outcome: Outcome::CannotJudge { why } }];
    if t.kernel_source.is_empty() {
        let drawn = t.counters.iter().any(|c| t.names.get(c.series).starts_with("PC samples/ms:"));
        return cannot(if drawn {
            "the file has PC samples, but they were not read into the trace (`source::annotate`)".to_string()
        } else {
            "no PC samples in the file (record with `cupti-record --pc-sampling`)".to_string()
        });
    }
    let found: Vec<RuleResult> = hot
        .iter()
        .filter_map(|h| {
            let n = note(t, h)?;
            let f = finding(h, w, n)?;
            Some(RuleResult { rule: RULE, outcome: Outcome::Found(f) })
        })
        .collect();
    if found.is_empty() {
        return cannot(format!("none of the {} hot kernels has readable PC samples", hot.len()));
    }
    found
}

fn finding(h: &HotKernel, w: &Windows, n: &KernelSourceNote) -> Option<Finding> {
    let (reason, reason_pct) = first_entry(&n.top_stalls)?;
    let at = match first_entry(&n.top_lines) {
        Some((line, pct)) => format!("; hottest line {line} ({pct:.1}% of its samples)"),
        None => String::new(),
    };
    let summary = format!(
        "{}: top stall {reason} ({reason_pct:.1}% of its {} PC samples){at}, on {:.1}% of the {} time",
        short_name(&h.name),
        n.samples,
        h.share_pct,
        w.what
    );
    let advice = format!("{} `cupti-convert source --kernel NAME` lists its lines and stalls.", advice_for(reason));
    Some(Finding {
        severity: h.severity(),
        summary,
        advice,
        count: h.count,
        time_ns: h.time_ns,
        share_pct: h.share_pct,
        events: h.evidence(),
    })
}

/// What a stall reason usually asks for (CUPTI's reason names, Nsight Compute's guidance).
fn advice_for(reason: &str) -> &'static str {
    match reason {
        "long_scoreboard" => {
            "Warps wait on global or local memory: make accesses coalesced, prefetch or keep data in shared memory, \
             or give each warp independent loads to overlap."
        }
        "short_scoreboard" => "Warps wait on shared memory or special math: look for bank conflicts.",
        "math_pipe_throttle" | "mio_throttle" | "lg_throttle" | "tex_throttle" => {
            "A pipe is saturated: spread the work over other instruction kinds or issue fewer, wider accesses."
        }
        "wait" | "dispatch_stall" | "no_instructions" => {
            "Fixed-latency dependencies: more independent instructions per warp (unrolling) hide them."
        }
        "barrier" | "membar" => "Warps wait at barriers: balance the work between a block's warps.",
        "selected" | "not_selected" => "Warps are issuing: the kernel is issue-bound; less work per result helps.",
        _ => "See Nsight Compute's description of this stall reason.",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_entry_of_sources_lists() {
        assert_eq!(first_entry("long_scoreboard 92.1%, selected 3.0%"), Some(("long_scoreboard", 92.1)));
        assert_eq!(first_entry("a, b.cu:44 99.8%, c.cu:1 0.2%"), Some(("a, b.cu:44", 99.8)), "a comma in a path");
        assert_eq!(first_entry("+0x1f0 50.0%"), Some(("+0x1f0", 50.0)));
        assert_eq!(first_entry(""), None);
        assert_eq!(first_entry("garbled"), None);
    }
}
