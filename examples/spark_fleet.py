#!/usr/bin/env python3
"""A job's ranks side by side in Spark: the tables of `cupti-convert export --parquet DIR`, queried with Spark SQL.

Each node exports its own recordings into one dataset (docs/FLEET.md), on a shared file system or copied to object
storage afterwards (each node's partitions are its own: they do not collide):

    cupti-convert export /scratch/job42/$(hostname)-*.cutr --parquet /scratch/job42/tables
    aws s3 sync /scratch/job42/tables s3://bucket/job42/tables

`tables/<table>/host=H/rank=R/part-N.parquet` (or `pid=P` where some recording has no rank; one recording gives
`tables/<table>.parquet`). This program registers the tables as views and asks the questions of `stats --by-rank`:

    stragglers   each NVTX step range (name starting with --step) per rank, and the slowest rank of each step;
                 then how often each rank was the slowest
    step-times   each step's time on each rank (ns; the instances of one name on a rank add up)
    nccl-share   kernels, kernel time and NCCL kernel time (names starting with `nccl`) per rank
    top-kernels  the kernels with the most time, per rank and innermost NVTX range (--top N, 0: all)
    totals       count and ns per kernel name, API function, copy/memset (stats' names: `Memcpy HtoD (Pageable
                 -> Device)`, `Memset (Device)`, with bytes) and closed NVTX range: `cupti-convert stats --json`'s
                 `kernels`, `api`, `memory_ops` and `nvtx` (`name`, `count`, `total_ns`), in its order

QUESTIONS is a comma-separated list of those (or `all`); each DATASET is a `--parquet` directory, all asked in one
Spark session (the JVM starts once). Text tables by default; `--json` prints one document:
{"spark_version": V, "datasets": [{"dataset": DIR, "answers": {QUESTION: {RESULT: {"columns": [...],
"rows": [[...], ...]}}}}]}, with the unsigned 64-bit columns (Spark reads them as decimal(20,0)) as integers.

On a cluster (Spark 4; the s3a:// connector, hadoop-aws, with its credentials set up as your cluster does):

    spark-submit --master yarn examples/spark_fleet.py --step "iter " stragglers,nccl-share s3a://bucket/job42/tables

On one machine, `pip install pyspark==4.3.0` (Java 17 or newer on the PATH or in JAVA_HOME), then

    python3 examples/spark_fleet.py --step "iter " all tables/
    # or: spark-submit --master "local[2]" examples/spark_fleet.py --json totals tables/

`tests/tests/spark.rs` runs it so, in local mode, on the tables of every fixture: the totals equal `stats --json`'s
and the stragglers of the two-rank all-reduce job equal `stats --by-rank --step "iter "`'s. The SQL is the SQL that
docs/FLEET.md runs on DuckDB, in Spark's dialect (`max_by` for DuckDB's `arg_max`).
"""
import argparse
import contextlib
import decimal
import json
import sys

QUESTIONS = ["stragglers", "step-times", "nccl-share", "top-kernels", "totals"]
TABLES = {
    "stragglers": ["nvtx_ranges"],
    "step-times": ["nvtx_ranges"],
    "nccl-share": ["kernels"],
    "top-kernels": ["kernels"],
    "totals": ["kernels", "api_calls", "memcpy", "memset", "nvtx_ranges"],
}

# Each step range's time per rank: the view `step_ranks` that stragglers and step-times read.
STEP_RANKS = """
select name, rank, count(*) as ranges, sum(duration_ns) as d
from nvtx_ranges
where startswith(name, :step) and end_ns is not null
group by name, rank
"""
# Steps in their natural order: by the number after the prefix where there is one (`iter 2` before `iter 10`).
STEP_ORDER = "try_cast(trim(substr(step, length(:step) + 1)) as bigint) asc nulls last, step"

SQL = {
    "stragglers": {
        "steps": f"""
            select name as step, max_by(rank, d) as slowest_rank, max(d) / 1e6 as ms, count(*) as ranks,
                   max(d) as slowest_ns, min(d) as fastest_ns, cast(max(d) - min(d) as double) / min(d) as spread
            from step_ranks
            group by name
            order by {STEP_ORDER}""",
        # How often each rank was the slowest (steps that ran on more than one rank).
        "slowest": """
            select slowest_rank as rank, count(*) as steps
            from (select name, max_by(rank, d) as slowest_rank, count(*) as ranks from step_ranks group by name)
            where ranks > 1
            group by slowest_rank
            order by steps desc, rank""",
    },
    "step-times": {
        "steps": f"""
            select name as step, rank, ranges, d as ns, d / 1e6 as ms
            from step_ranks
            order by {STEP_ORDER}, rank""",
    },
    "nccl-share": {
        "ranks": """
            select rank, count(*) as kernels, sum(duration_ns) / 1e6 as kernel_ms,
                   cast(sum(case when name like 'nccl%' then duration_ns else 0 end) as double)
                     / sum(duration_ns) as nccl_share,
                   sum(duration_ns) as kernel_ns,
                   sum(case when name like 'nccl%' then duration_ns else 0 end) as nccl_ns
            from kernels
            group by rank
            order by rank""",
    },
    "top-kernels": {
        "kernels": """
            select rank, nvtx_range, name, count(*) as count, sum(duration_ns) as ns
            from kernels
            group by rank, nvtx_range, name
            order by ns desc, rank, nvtx_range, name""",
    },
    "totals": {
        "kernels": """
            select name, count(*) as count, sum(duration_ns) as total_ns
            from kernels group by name order by total_ns desc, name""",
        "api": """
            select name, count(*) as count, sum(duration_ns) as total_ns
            from api_calls group by name order by total_ns desc, name""",
        "memory_ops": """
            select name, count(*) as count, sum(duration_ns) as total_ns, sum(bytes) as bytes
            from (select concat('Memcpy ', copy_kind, ' (', src_kind, ' -> ', dst_kind, ')') as name,
                         duration_ns, bytes
                  from memcpy
                  union all
                  select concat('Memset (', memory_kind, ')') as name, duration_ns, bytes from memset)
            group by name order by total_ns desc, name""",
        "nvtx": """
            select name, count(*) as count, sum(duration_ns) as total_ns
            from nvtx_ranges where end_ns is not null group by name order by total_ns desc, name""",
    },
}


def exists(spark, path):
    """Whether a path exists, in whatever file system Hadoop reads it from (file:, s3a:, hdfs:...)."""
    jvm, conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
    p = jvm.org.apache.hadoop.fs.Path(path)
    return p.getFileSystem(conf).exists(p)


def read_table(spark, dataset, table):
    """One table of an export: Hive partitions (several recordings) or one file. host stays a string; pid and
    rank are bigints whether they come from the path or from the file (rank: UInt64, decimal(20,0) in Spark)."""
    from pyspark.sql import functions as F

    base = dataset.rstrip("/")
    df = spark.read.parquet(f"{base}/{table}" if exists(spark, f"{base}/{table}") else f"{base}/{table}.parquet")
    for c in ("pid", "rank"):
        if c in df.columns:
            df = df.withColumn(c, F.col(c).cast("bigint"))
    return df


def cell(v):
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("questions", metavar="QUESTIONS", help="comma-separated: " + ", ".join(QUESTIONS) + ", or all")
    ap.add_argument("datasets", metavar="DATASET", nargs="+", help="a directory of `cupti-convert export --parquet`")
    ap.add_argument("--step", default="iter ", metavar="PREFIX",
                    help="the NVTX step ranges' name prefix (default: 'iter ')")
    ap.add_argument("--top", type=int, default=20, metavar="N", help="top-kernels: rows shown (0: all; default 20)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--out", metavar="FILE", help="write the output here, not to standard output (spark-submit "
                    "sends the program's standard error there too, and Spark's log lines with it)")
    a = ap.parse_args()
    asked = QUESTIONS if a.questions == "all" else a.questions.split(",")
    for q in asked:
        if q not in QUESTIONS:
            ap.error(f"unknown question {q!r} (known: {', '.join(QUESTIONS)}, all)")
    out_file = open(a.out, "w") if a.out else sys.stdout

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("cutr-fleet").getOrCreate()
    # host=007 is a host name, not the number 7: partition values are strings, cast where they are numbers.
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    args = {"step": a.step}
    out = []
    for d in a.datasets:
        for t in sorted({t for q in asked for t in TABLES[q]}):
            read_table(spark, d, t).createOrReplaceTempView(t)
        if {"stragglers", "step-times"} & set(asked):
            spark.sql(STEP_RANKS, args=args).createOrReplaceTempView("step_ranks")
        answers = {}
        for q in asked:
            answers[q] = {}
            for name, sql in SQL[q].items():
                df = spark.sql(sql, args=args) if ":step" in sql else spark.sql(sql)
                if q == "top-kernels" and a.top > 0:
                    df = df.limit(a.top)
                if a.json:
                    answers[q][name] = {"columns": df.columns, "rows": [[cell(v) for v in r] for r in df.collect()]}
                else:
                    n = 1 << 20 if q != "top-kernels" or a.top <= 0 else a.top
                    with contextlib.redirect_stdout(out_file):
                        print(f"== {d}: {q} ({name})")
                        df.show(n=n, truncate=100)
        out.append({"dataset": d, "answers": answers})
    if a.json:
        json.dump({"spark_version": spark.version, "datasets": out}, out_file)
        print(file=out_file)
    if out_file is not sys.stdout:
        out_file.close()
    spark.stop()


if __name__ == "__main__":
    main()
