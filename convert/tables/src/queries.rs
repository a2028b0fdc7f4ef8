//! The named queries (`cupti-convert sql --query NAME`): the questions asked of a job's ranks, in DuckDB's SQL
//! over these tables (a view per table, as `cupti-convert-sql` makes them). Steps are the NVTX ranges whose name
//! starts with a prefix (`iter `), in the numeric order of what follows it; a step's time on a rank is the sum of
//! its instances there.

/// One named query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamedQuery {
    /// Per step: the slowest rank (the lower of two that tie, as `stats --by-rank`), its time, how far it is ahead
    /// of the median rank, the spread.
    Stragglers,
    /// Per rank: kernels, kernel time, the share of it in NCCL kernels.
    NcclShare,
    /// Kernels by total time over every rank, with their per-rank least and most.
    TopKernels,
    /// Each step's time on each rank.
    StepTimes,
}

impl NamedQuery {
    pub const ALL: [NamedQuery; 4] =
        [NamedQuery::Stragglers, NamedQuery::NcclShare, NamedQuery::TopKernels, NamedQuery::StepTimes];

    pub fn name(self) -> &'static str {
        match self {
            NamedQuery::Stragglers => "stragglers",
            NamedQuery::NcclShare => "nccl-share",
            NamedQuery::TopKernels => "top-kernels",
            NamedQuery::StepTimes => "step-times",
        }
    }

    pub fn parse(s: &str) -> Result<NamedQuery, String> {
        NamedQuery::ALL.into_iter().find(|q| q.name() == s).ok_or_else(|| {
            let names: Vec<&str> = NamedQuery::ALL.iter().map(|q| q.name()).collect();
            format!("unknown query '{s}': one of {}", names.join(", "))
        })
    }

    /// The SQL, for steps named `step_prefix…` and the `top` kernels (0: all).
    pub fn sql(self, step_prefix: &str, top: usize) -> String {
        let p = step_prefix.replace('\'', "''");
        let step_ranks = format!(
            "with step_ranks as (select name, rank, count(*) as ranges, sum(duration_ns) as d from nvtx_ranges \
             where starts_with(name, '{p}') and end_ns is not null group by name, rank)"
        );
        let step_order = format!("try_cast(trim(substr(step, length('{p}') + 1)) as bigint) nulls last, step");
        let limit = if top == 0 { String::new() } else { format!(" limit {top}") };
        match self {
            NamedQuery::Stragglers => format!(
                "{step_ranks} select name as step, first(rank order by d desc, rank) as slowest_rank, max(d) as slowest_ns, \
                 (max(d) - median(d)) / 1e6 as lead_over_median_ms, count(*) as ranks, \
                 (max(d) - min(d)) / min(d) as spread from step_ranks group by name order by {step_order}"
            ),
            NamedQuery::StepTimes => {
                format!(
                    "{step_ranks} select name as step, rank, ranges, d as ns from step_ranks order by {step_order}, rank"
                )
            }
            NamedQuery::NcclShare => "select rank, count(*) as kernels, sum(duration_ns) as kernel_ns, \
                 sum(case when name like 'nccl%' then duration_ns else 0 end) as nccl_ns, \
                 sum(case when name like 'nccl%' then duration_ns else 0 end) / sum(duration_ns) as nccl_share \
                 from kernels group by rank order by rank"
                .to_string(),
            NamedQuery::TopKernels => format!(
                "with per_rank as (select name, rank, count(*) as n, sum(duration_ns) as ns from kernels \
                 group by name, rank) select name, sum(n) as count, sum(ns) as total_ns, count(*) as ranks, \
                 min(ns) as least_rank_ns, max(ns) as most_rank_ns from per_rank group by name \
                 order by total_ns desc, name{limit}"
            ),
        }
    }
}
