#!/usr/bin/env bash
# Long runs (issue 35): generated recordings of 10M and 100M records (and 1B with --with-1b), then for each
# summarizing command its wall time and peak RSS, as JSON lines under measurements/long_runs/.
#
#   bash bench/long_runs.sh [--with-1b] [--bin PATH] [--dir DIR] [--tag TAG] [--sizes "N N ..."] [--max-rss-gb G]
#                           [--commands "stats --stream,info,source"]
#
# --bin      the cupti-convert to measure (default target/release/cupti-convert; build it with
#            `cargo build --release -p cutr-convert`)
# --dir      where the generated recordings and outputs go (default /tmp/cutr-long-runs; 1B records need ~7 GB:
#            two recordings of 3.2 GB for `diff`); everything there is deleted at the end, unless --keep
# --keep     keep the generated recordings, and use those already in --dir instead of generating them again (runs
#            split over several calls of a time-limited machine)
# --reps-from-100m N  repetitions at 100M records (default 3; 1B runs once)
# --tag      names the results file, measurements/long_runs/TAG.jsonl, and each line (default: the commit the script
#            runs from; name the binary's commit when it is another's)
# --sizes    record counts (default "10000000 100000000"); --with-1b adds 1000000000
# --commands only these commands (comma-separated, as the results name them; default all). Without diff, one
#            recording per size is generated (1B records: one 3.2 GB file, ~7 minutes on 2 cores).
# --max-rss-gb  a command whose peak RSS, scaled linearly from the smallest size, would pass G GiB is not run at the
#            larger size (default: 3/4 of the machine's memory): the whole-trace path of main needs 0.7-1.4x the
#            decompressed records, ~70-140 GB at 1B. The skip is recorded with its estimate.
#
# `diff --stream` and `export --parquet --stream` force the streamed paths (past 2 GiB of records they are chosen
# anyway). Each command runs 3 times at sizes below 1B and once at 1B. The generated recordings have no PC samples: `source`
# measures opening the file and finding none. `stats --stream` is measured only where the binary
# has the flag (the streaming engineer's); `stats --stream --nvtx-names each` (every step its own NVTX row, as
# before numbered names were folded) where it has that one too; `analyze --no-stream` and `analyze --stream` (with
# `--step step`) where analyze has --stream. The time and RSS are /usr/bin/time's %e and %M (KiB).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/target/release/cupti-convert"
dir=/tmp/cutr-long-runs
sizes="10000000 100000000"
tag=""
mem_kib=$(awk '/MemTotal/ {print $2}' /proc/meminfo)
max_rss_kib=$((mem_kib * 3 / 4))
while [ $# -gt 0 ]; do
  case "$1" in
    --with-1b) with_1b=1 ;;
    --bin) bin=$2; shift ;;
    --dir) dir=$2; shift ;;
    --tag) tag=$2; shift ;;
    --sizes) sizes=$2; shift ;;
    --max-rss-gb) max_rss_kib=$(($2 * 1024 * 1024)); shift ;;
    --commands) only=$2; shift ;;
    --keep) keep=1 ;;
    --reps-from-100m) reps_large=$2; shift ;;
    *) echo "long_runs.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "${with_1b:-}" ] && sizes="$sizes 1000000000"
[ -x "$bin" ] || { echo "long_runs.sh: no binary at $bin (cargo build --release -p cutr-convert)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "long_runs.sh: needs /usr/bin/time (GNU time)" >&2; exit 2; }
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
tag=${tag:-$commit}
out="$root/measurements/long_runs/$tag.jsonl"
mkdir -p "$(dirname "$out")" "$dir"
if [ -z "${keep:-}" ]; then trap 'rm -rf "$dir"' EXIT; fi
# The help read whole first: `grep -q` would close the pipe early, and cupti-convert ends on SIGPIPE (141), which
# pipefail reports as "no flag".
stats_help=$("$bin" stats --help 2>&1 || true)
has_stream=0
case "$stats_help" in *--stream*) has_stream=1 ;; esac
# `stats --nvtx-names each` keeps one NVTX row per step name (9 million at 1B records), as stats did before folding.
has_names=0
case "$stats_help" in *--nvtx-names*) has_names=1 ;; esac
analyze_help=$("$bin" analyze --help 2>&1 || true)
has_analyze_stream=0
case "$analyze_help" in *--stream*) has_analyze_stream=1 ;; esac
host_cores=$(nproc)

# One JSON line: the command, the size, the repetition, its wall time, peak RSS and exit code.
record() { # size command rep wall_s rss_kib rc [note]
  printf '{"tag":"%s","script_commit":"%s","bin":"%s","cores":%s,"records":%s,"command":"%s","rep":%s,"wall_s":%s,"peak_rss_kib":%s,"exit":%s%s}\n' \
    "$tag" "$commit" "$bin" "$host_cores" "$1" "$2" "$3" "$4" "$5" "$6" "${7:+,\"note\":\"$7\"}" | tee -a "$out"
}

# Runs "$@" under /usr/bin/time, its output thrown away; prints "wall rss rc".
measure() {
  local t rc
  t=$(mktemp)
  set +e
  /usr/bin/time -f "%e %M" -o "$t" "$@" >/dev/null 2>"$t.err"
  rc=$?
  set -e
  # A command that exits non-zero for its verdict (diff: 3 regressed, 4 different programs) still ran whole.
  echo "$(tail -1 "$t") $rc"
  rm -f "$t" "$t.err"
}

# The smallest size's peak RSS of each command, to estimate the larger sizes'.
declare -A first_rss
first_size=$(echo "$sizes" | tr ' ' '\n' | sort -n | head -1)

for n in $sizes; do
  a="$dir/g$n-a.cutr"
  b="$dir/g$n-b.cutr"
  reps=3
  [ "$n" -ge 100000000 ] && reps=${reps_large:-3}
  [ "$n" -ge 1000000000 ] && reps=1
  if [ -n "${keep:-}" ] && [ -s "$a" ]; then
    record "$n" "generate" 1 null null null "kept from an earlier run: $(stat -c %s "$a") bytes"
  else
    read -r wall rss rc < <(measure "$bin" generate -o "$a" --records "$n" --seed 1)
    record "$n" "generate" 1 "$wall" "$rss" "$rc" "$(stat -c %s "$a") bytes"
  fi
  commands=("info|$a" "stats|$a" "diff|$a $b" "export --parquet|$a" "source|$a")
  # The streamed paths forced (past 2 GiB of records they are chosen anyway; below, the whole path is).
  commands+=("diff --stream|$a $b" "export --parquet --stream|$a")
  [ "$has_stream" = 1 ] && commands+=("stats --stream|$a")
  [ "$has_stream" = 1 ] && [ "$has_names" = 1 ] && commands+=("stats --stream --nvtx-names each|$a")
  # `analyze` loaded and streamed (two passes), the generated steps (`step N` ranges) as its steps.
  [ "$has_analyze_stream" = 1 ] && commands+=("analyze --no-stream --step step|$a" "analyze --stream --step step|$a")
  if [ -n "${only:-}" ]; then
    wanted=()
    for entry in "${commands[@]}"; do
      case ",$only," in *",${entry%%|*},"*) wanted+=("$entry") ;; esac
    done
    commands=("${wanted[@]}")
  fi
  if printf '%s\n' "${commands[@]}" | grep -q '^diff'; then
    if [ -n "${keep:-}" ] && [ -s "$b" ]; then
      record "$n" "generate" 2 null null null "kept from an earlier run: $(stat -c %s "$b") bytes"
    else
      read -r wall rss rc < <(measure "$bin" generate -o "$b" --records "$n" --seed 2)
      record "$n" "generate" 2 "$wall" "$rss" "$rc" "$(stat -c %s "$b") bytes"
    fi
  fi
  for entry in "${commands[@]}"; do
    cmd=${entry%%|*}
    files=${entry#*|}
    if [ "$n" != "$first_size" ] && [ -n "${first_rss[$cmd]:-}" ]; then
      estimate=$((first_rss[$cmd] * (n / first_size)))
      if [ "$estimate" -gt "$max_rss_kib" ]; then
        record "$n" "$cmd" 0 null null null "skipped: estimated $((estimate / 1024 / 1024)) GiB peak RSS (linear from $first_size records) over the cap of $((max_rss_kib / 1024 / 1024)) GiB"
        continue
      fi
    fi
    for rep in $(seq 1 $reps); do
      case "$cmd" in
        "export --parquet")
          rm -rf "$dir/parquet"
          # shellcheck disable=SC2086
          read -r wall rss rc < <(measure "$bin" export --parquet "$dir/parquet" $files) ;;
        "export --parquet --stream")
          rm -rf "$dir/parquet"
          # shellcheck disable=SC2086
          read -r wall rss rc < <(measure "$bin" export --stream --parquet "$dir/parquet" $files) ;;
        diff)
          # shellcheck disable=SC2086
          read -r wall rss rc < <(measure "$bin" diff $files) ;;
        *)
          # shellcheck disable=SC2086
          read -r wall rss rc < <(measure "$bin" $cmd $files) ;;
      esac
      record "$n" "$cmd" "$rep" "$wall" "$rss" "$rc"
      [ "$n" = "$first_size" ] && first_rss[$cmd]=$rss
    done
    rm -rf "$dir/parquet"
  done
  if [ -z "${keep:-}" ]; then rm -f "$a" "$b"; fi
done
echo "long_runs.sh: results in $out" >&2
