#!/usr/bin/env bash
# Hashes every output of a cupti-convert binary: Perfetto (compressed, plain, gzip), Chrome JSON (plain, gzip),
# stats (text, JSON, CSV), diff (text, JSON, Markdown) and info (text, JSON), on every fixture and on a generated
# 10M-record trace, each on 1, 3 and 16 workers. Two binaries whose hash lists are equal write the same bytes.
#   tools/same-outputs.sh BIN OUT_DIR [--quick]     (writes OUT_DIR/hashes.txt; --quick skips the 10M trace)
#   diff before/hashes.txt after/hashes.txt
# The generated traces are made once into $CUTR_SAME_OUTPUTS_DATA (default /tmp/cutr-same-outputs) and reused, so
# that both binaries convert the same files.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath "$1")
out=$(realpath -m "$2")
quick=${3:-}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Outputs and generated inputs by relative names: paths are written into outputs (traceName, stats' file list).
cd "$work"
hashes="$out/hashes.txt"
: >"$hashes"

# hash NAME CMD...: runs CMD (stdout captured; stderr kept apart) and records the hash of what it wrote.
hash_stdout() {
    local name=$1
    shift
    local rc=0
    "$@" >stdout 2>stderr || rc=$?
    printf '%s rc=%s %s\n' "$name" "$rc" "$(sha256sum <stdout | cut -c1-16)" >>"$hashes"
}
hash_file() {
    local name=$1 file=$2
    shift 2
    local rc=0
    "$@" -q -o "$file" 2>stderr || rc=$?
    printf '%s rc=%s %s\n' "$name" "$rc" "$(sha256sum <"$file" | cut -c1-16)" >>"$hashes"
    rm -f "$file"
}

fixtures=()
while IFS= read -r f; do fixtures+=("$f"); done < <(cd "$repo" && find fixtures -name '*.cutr' | sort)
if [ "$quick" != "--quick" ]; then
    data=${CUTR_SAME_OUTPUTS_DATA:-/tmp/cutr-same-outputs}
    mkdir -p "$data"
    [ -f "$data/big.cutr" ] || "$bin" generate -o "$data/big.cutr" --records 10000000 --seed 1 2>/dev/null
    [ -f "$data/small.cutr" ] || "$bin" generate -o "$data/small.cutr" --records 1000000 --seed 2 2>/dev/null
    ln -s "$data/big.cutr" big.cutr
    ln -s "$data/small.cutr" small.cutr
fi

for workers in 1 3 16; do
    export RAYON_NUM_THREADS=$workers
    for f in "${fixtures[@]}"; do
        p="$repo/$f"
        tag="$f@$workers"
        hash_file "$tag perfetto" o.pftrace "$bin" "$p" --perfetto
        hash_file "$tag perfetto-plain" o.pftrace "$bin" "$p" --perfetto --no-compress
        hash_file "$tag perfetto-gzip" o.pftrace.gz "$bin" "$p" --perfetto --gzip
        hash_file "$tag chrome" o.json "$bin" "$p" --chrome
        hash_file "$tag chrome-gzip" o.json.gz "$bin" "$p" --chrome --gzip
        hash_file "$tag perfetto-window" o.pftrace "$bin" "$p" --perfetto --start 10ms --end 200ms --kinds kernel,runtime,nvtx
        hash_stdout "$tag stats" "$bin" stats "$p"
        hash_stdout "$tag stats-json" "$bin" stats "$p" --json
        hash_stdout "$tag stats-csv" "$bin" stats "$p" --csv --top 5
        hash_stdout "$tag info" "$bin" info "$p"
        hash_stdout "$tag info-json" "$bin" info "$p" --json
        hash_stdout "$tag diff" "$bin" diff "$repo/fixtures/regress/base_a.cutr" "$p"
        hash_stdout "$tag diff-json" "$bin" diff "$repo/fixtures/regress/base_a.cutr" "$p" --json
        hash_stdout "$tag diff-md" "$bin" diff "$repo/fixtures/regress/base_a.cutr" "$p" --markdown
    done
    ar="$repo/fixtures/allreduce"
    hash_file "allreduce-merged@$workers perfetto" o.pftrace "$bin" "$ar/allreduce-588.cutr" "$ar/allreduce-589.cutr" --perfetto
    hash_file "allreduce-merged@$workers chrome" o.json "$bin" "$ar/allreduce-588.cutr" "$ar/allreduce-589.cutr" --chrome
    hash_stdout "allreduce-merged@$workers stats-json" "$bin" stats "$ar/allreduce-588.cutr" "$ar/allreduce-589.cutr" --json
    rg="$repo/fixtures/regress"
    hash_stdout "regress-runs@$workers diff" "$bin" diff --base "$rg/base_a.cutr" "$rg/base_b.cutr" --new "$rg/heavy_a.cutr" "$rg/heavy_b.cutr"
    if [ "$quick" != "--quick" ]; then
        hash_file "10M@$workers perfetto" o.pftrace "$bin" big.cutr --perfetto
        hash_file "10M@$workers chrome" o.json "$bin" big.cutr --chrome
        hash_stdout "10M@$workers stats" "$bin" stats big.cutr
        hash_stdout "10M@$workers stats-json" "$bin" stats big.cutr --json
        hash_stdout "10M@$workers stats-csv" "$bin" stats big.cutr --csv
        hash_stdout "10M@$workers diff" "$bin" diff small.cutr big.cutr --json
    fi
done
echo "$(wc -l <"$hashes") outputs hashed into $hashes"
