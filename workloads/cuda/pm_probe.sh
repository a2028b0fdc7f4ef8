#!/usr/bin/env bash
# Finds out why CUPTI PM sampling gives no samples on this GPU machine, and which configuration gives some.
#   workloads/cuda/pm_probe.sh OUTDIR
# 1. records the machine (nvidia-smi MIG / persistence / clocks, driver profiling params, uid, CUPTI version, virtualization);
# 2. builds workloads/cuda/pm_probe.cu (the exact nvcc line is printed);
# 3. saves NVIDIA's pm_sampling sample's sources to OUTDIR/nvidia_sample_src/, builds it in a temporary copy and runs
#    it (usage, metric query, default arguments twice, two other intervals); runs NVIDIA's range_profiling sample
#    too if present (a control that the performance counters work at all);
# 4. runs a matrix of pm_probe variants, each under `timeout 90` (pm_probe's own watchdog is 60 s), one knob changed at
#    a time from the default (time trigger, 100 us, 64 MiB hardware buffer, KEEP_OLDEST, 10000 samples per image,
#    decode thread every 10 ms, image reset only when full, cuptiProfilerInitialize called);
# 5. prints a summary table (variant -> samples, overflow, ...) and saves it to OUTDIR/summary.txt.
# Everything goes to stdout and OUTDIR/pm_probe.log; each run's output also to OUTDIR/variants/NAME.txt (samples as
# NAME.csv.gz). Took 110 s on an H100 (CUDA 13.0, driver 580.159.04); variants still waiting after PM_PROBE_BUDGET_S
# seconds (default 330) are skipped.
# Environment: CUDA_HOME (default /usr/local/cuda), NVCC, CUDA_ARCH (default sm_90), PM_PROBE_BUDGET_S.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: pm_probe.sh OUTDIR}
mkdir -p "$out/variants" "$out/bin" "$out/nvidia_sample_runs" || exit 1
out=$(cd "$out" && pwd)
log=$out/pm_probe.log
: >"$log"
exec > >(tee -a "$log") 2>&1
tee_pid=$!
budget=${PM_PROBE_BUDGET_S:-330}
section() { echo; echo "==================== $* (t=${SECONDS}s)"; }
run() { echo "+ $*"; "$@"; local rc=$?; echo "(rc=$rc)"; return $rc; }

cuda=${CUDA_HOME:-/usr/local/cuda}
arch=${CUDA_ARCH:-sm_90}
first_dir_with() { # FILE-GLOB DIR...: first DIR that holds a match
  local pat=$1 d; shift
  for d in "$@"; do compgen -G "$d/$pat" >/dev/null 2>&1 && { echo "$d"; return 0; }; done
  return 1
}
cupti_inc=$(first_dir_with cupti_pmsampling.h "$cuda/extras/CUPTI/include" "$cuda/include" \
  "$cuda/targets/x86_64-linux/include") || cupti_inc=""
cupti_lib=$(first_dir_with 'libcupti.so*' "$cuda/extras/CUPTI/lib64" "$cuda/lib64" "$cuda/targets/x86_64-linux/lib") \
  || cupti_lib=""
export LD_LIBRARY_PATH="${cupti_lib:+$cupti_lib:}$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ------------------------------------------------------------------------------------------------------------ machine
section "machine"
date -u
hostname
uname -a
echo "id -u: $(id -u)"; id
head -n 2 /etc/os-release 2>/dev/null
run nvidia-smi -L
run nvidia-smi
echo '+ nvidia-smi -q | grep -i -A3 -E "mig|persistence|clocks"'
nvidia-smi -q | grep -i -A3 -E "mig|persistence|clocks"
echo '+ nvidia-smi -q | grep -i -E "product name|driver version|cuda version|virtualization|host vgpu|confidential|addressing|compute mode|bus id"'
nvidia-smi -q | grep -i -E "product name|driver version|cuda version|virtualization|host vgpu|confidential|addressing|compute mode|bus id"
run nvidia-smi -q -d PERFORMANCE
run nvidia-smi conf-compute -f
run nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
echo '+ cat /proc/driver/nvidia/params | grep -i profil'
cat /proc/driver/nvidia/params | grep -i profil
run cat /proc/driver/nvidia/version
echo '+ grep -rs NVreg /etc/modprobe.d /lib/modprobe.d /usr/lib/modprobe.d'
grep -rs NVreg /etc/modprobe.d /lib/modprobe.d /usr/lib/modprobe.d
echo "virtualization: $(systemd-detect-virt 2>/dev/null || echo unknown); dmi: $(cat /sys/class/dmi/id/sys_vendor 2>/dev/null) / $(cat /sys/class/dmi/id/product_name 2>/dev/null)"
echo '+ other profilers or DCGM on this machine (they hold the same performance monitors):'
ps -eo pid,comm,args 2>/dev/null | grep -i -E "dcgm|hostengine|ncu|nsys|nsight|cupti" | grep -v -E "grep|pm_probe" || echo "(none)"
echo "+ environment (CUDA / NVIDIA / LD_ variables only)"
env | grep -E "^(CUDA|NVIDIA|NV_|LD_LIBRARY_PATH|LD_PRELOAD)" | sort
nvcc=${NVCC:-$(command -v nvcc || echo "$cuda/bin/nvcc")}
run "$nvcc" --version
echo "cuda=$cuda cupti_inc=${cupti_inc:-NOT FOUND} cupti_lib=${cupti_lib:-NOT FOUND}"
echo "+ CUPTI libraries (the versioned file name carries CUPTI's version):"
ls -la "$cuda/lib64" "$cuda/extras/CUPTI/lib64" 2>/dev/null | grep -i -E "cupti|nvperf|pcsampl|checkpoint|^/|:$"
echo "CUPTI_API_VERSION in the header: $(grep -h -m1 '#define CUPTI_API_VERSION' "${cupti_inc:-/nonexistent}/cupti_version.h" 2>/dev/null)"

# ------------------------------------------------------------------------------------------------------------ build
section "build pm_probe"
bin=$out/bin
probe=""
if [ -z "$cupti_inc" ] || [ -z "$cupti_lib" ]; then
  echo "cupti_pmsampling.h or libcupti not found under $cuda: cannot build pm_probe"
else
  if [ -e "$cupti_lib/libcupti.so" ]; then cupti_link=(-lcupti)
  else cupti_link=("-l:$(cd "$cupti_lib" && ls libcupti.so.* | sort | head -n 1)"); fi
  build=("$nvcc" -O2 -std=c++17 -arch="$arch" -lineinfo "$here/pm_probe.cu" -I"$cupti_inc" -L"$cupti_lib"
    "${cupti_link[@]}" -lcuda -lpthread -Xlinker -rpath -Xlinker "$cupti_lib" -o "$bin/pm_probe")
  if run "${build[@]}"; then probe=$bin/pm_probe
  else
    echo "retrying with the driver stub library directory for -lcuda"
    build+=(-L"$cuda/lib64/stubs")
    run "${build[@]}" && probe=$bin/pm_probe
  fi
fi
[ -n "$probe" ] && { echo "+ ldd $probe"; ldd "$probe" | grep -i -E "cupti|cuda|nvperf"; }

# ------------------------------------------------------------------------------------------------------------ NVIDIA's sample
section "NVIDIA's pm_sampling sample"
samples=$cuda/extras/CUPTI/samples
if [ ! -d "$samples/pm_sampling" ]; then
  found=$(find "$cuda/" -maxdepth 5 -type d -name pm_sampling 2>/dev/null | head -n 1)
  [ -n "$found" ] && samples=$(dirname "$found")
fi
nv_summary=()
if [ -d "$samples/pm_sampling" ]; then
  echo "samples directory: $samples"
  ls "$samples"
  mkdir -p "$out/nvidia_sample_src"
  cp -r "$samples/pm_sampling" "$out/nvidia_sample_src/"
  [ -d "$samples/common" ] && cp -r "$samples/common" "$out/nvidia_sample_src/"
  [ -d "$samples/range_profiling" ] && cp -r "$samples/range_profiling" "$out/nvidia_sample_src/"
  echo "sources saved to $out/nvidia_sample_src:"
  (cd "$out/nvidia_sample_src" && find . -type f | sort)
  echo "--- pm_sampling/Makefile"
  cat "$samples/pm_sampling/Makefile" 2>/dev/null
  # A temporary copy laid out like extras/CUPTI (include, lib64 ... linked back), so the Makefile's relative paths hold.
  tmp=$(mktemp -d /tmp/pm_probe_samples.XXXXXX)
  cupti_root=$(cd "$samples/.." && pwd)
  mkdir -p "$tmp/CUPTI/samples"
  for e in "$cupti_root"/*; do [ "$(basename "$e")" = samples ] || ln -s "$e" "$tmp/CUPTI/"; done
  cp -r "$samples/pm_sampling" "$tmp/CUPTI/samples/"
  [ -d "$samples/common" ] && cp -r "$samples/common" "$tmp/CUPTI/samples/"
  [ -d "$samples/range_profiling" ] && cp -r "$samples/range_profiling" "$tmp/CUPTI/samples/"
  sdir=$tmp/CUPTI/samples/pm_sampling
  (cd "$sdir" && make clean >/dev/null 2>&1; echo "+ make CUDA_INSTALL_PATH=$cuda (in $sdir)";
   timeout 180 make CUDA_INSTALL_PATH="$cuda") >"$out/nvidia_sample_runs/make.txt" 2>&1
  echo "(make rc=$?)"; tail -n 30 "$out/nvidia_sample_runs/make.txt"
  nv=$(find "$sdir" -maxdepth 1 -type f -name pm_sampling -perm -u+x | head -n 1)
  if [ -n "$nv" ]; then
    nvrun() { # NAME ARGS...
      local name=$1; shift
      echo "--- NVIDIA pm_sampling $name: $nv $*"
      (cd "$sdir" && timeout -k 5 90 "$nv" "$@") >"$out/nvidia_sample_runs/$name.txt" 2>&1
      local rc=$?
      cat "$out/nvidia_sample_runs/$name.txt"
      echo "(rc=$rc)"
      local ns err
      ns=$(grep -m1 -o "Total num of Samples: [0-9]*" "$out/nvidia_sample_runs/$name.txt" | grep -o "[0-9]*$")
      grep -q "No samples to print" "$out/nvidia_sample_runs/$name.txt" && ns=0
      err=$(grep -m1 -o -E "Function [A-Za-z_]+.* failed with error\([0-9]+\): [A-Z_]+" "$out/nvidia_sample_runs/$name.txt" |
        sed -E 's/^Function ([A-Za-z_]+).*: ([A-Z_]+)$/\1:\2/')
      nv_summary+=("nvidia_$name rc=$rc samples=${ns:-?} error=${err:--}")
    }
    echo "--- usage"
    (cd "$sdir" && timeout 30 "$nv" --help) 2>&1; echo "(rc=$?)"
    (cd "$sdir" && timeout 60 "$nv" -q) >"$out/nvidia_sample_runs/query_base_metrics.txt" 2>&1
    echo "--- '$nv -q' (base metrics): $(wc -l <"$out/nvidia_sample_runs/query_base_metrics.txt") lines in nvidia_sample_runs/query_base_metrics.txt; first 15:"
    head -n 15 "$out/nvidia_sample_runs/query_base_metrics.txt"
    grep -n -E "samplingInterval = |hardwareBufferSize = |maxSamples = |NUM_OF_ITERATIONS = |NUM_OF_ELEMS = " \
      "$sdir/pm_sampling.cu" "$sdir/pm_sampling.h" 2>/dev/null
    nvrun default
    nvrun default_again
    nvrun interval_100us -i 100000
    nvrun interval_1ms -i 1000000
    # Its decode thread re-initializes the counter-data image after every decode; for 10000 samples that takes tens
    # of ms, longer than its whole ~15 ms workload. With a small image it has time to decode during collection.
    nvrun maxsamples_500 -s 500
    nvrun maxsamples_100 -s 100
  else
    echo "pm_sampling sample did not build (see nvidia_sample_runs/make.txt)"
  fi
  rdir=$tmp/CUPTI/samples/range_profiling
  if [ -d "$rdir" ]; then
    echo "--- NVIDIA range_profiling sample (control: do the performance counters work at all?)"
    (cd "$rdir" && timeout 180 make CUDA_INSTALL_PATH="$cuda") >"$out/nvidia_sample_runs/make_range_profiling.txt" 2>&1
    echo "(make rc=$?)"
    rp=$(find "$rdir" -maxdepth 1 -type f -name range_profiling -perm -u+x | head -n 1)
    if [ -n "$rp" ]; then
      (cd "$rdir" && timeout -k 5 60 "$rp") >"$out/nvidia_sample_runs/range_profiling.txt" 2>&1
      rc=$?
      head -n 80 "$out/nvidia_sample_runs/range_profiling.txt"
      echo "(rc=$rc; full output in nvidia_sample_runs/range_profiling.txt)"
      nv_summary+=("nvidia_range_profiling rc=$rc")
    else
      tail -n 20 "$out/nvidia_sample_runs/make_range_profiling.txt"
    fi
  fi
  rm -rf "$tmp"
else
  echo "NVIDIA's pm_sampling sample not found under $cuda"
fi

# ------------------------------------------------------------------------------------------------------------ pm_probe
results=$out/results.txt
: >"$results"
variant() { # NAME ARGS...: one pm_probe run
  local name=$1; shift
  if [ -z "$probe" ]; then echo "RESULT label=$name status=not_built" >>"$results"; return; fi
  if [ "$SECONDS" -ge "$budget" ]; then
    echo "== variant $name: SKIPPED (t=${SECONDS}s >= budget ${budget}s)"
    echo "RESULT label=$name status=skipped_budget" >>"$results"
    return
  fi
  local f=$out/variants/$name.txt
  echo
  echo "==================== variant $name (t=${SECONDS}s): pm_probe $*"
  timeout -k 5 90 "$probe" --label "$name" --csv "$out/variants/$name.csv" "$@" >"$f" 2>&1
  local rc=$?
  cat "$f"
  echo "(rc=$rc)"
  [ -f "$out/variants/$name.csv" ] && gzip -f "$out/variants/$name.csv"
  local res
  res=$(grep '^RESULT ' "$f" | tail -n 1)
  [ -z "$res" ] && res="RESULT label=$name status=no_result_line"
  echo "$res rc=$rc" >>"$results"
}

if [ -n "$probe" ]; then
  section "pm_probe --selftest (report code on synthetic samples, no GPU)"
  "$probe" --selftest --label selftest | grep -E "^(TIMESTAMP_DOMAIN|SYSCLK_HZ|RESULT)"
  section "pm_probe --list --list-sub (all PM sampling base metrics of this chip)"
  timeout -k 5 90 "$probe" --list --list-sub --label list >"$out/pm_probe_list.txt" 2>&1
  echo "(rc=$?; full list in pm_probe_list.txt)"
  grep -v -E "^BASE |^    sub: " "$out/pm_probe_list.txt"
  echo "--- metrics of interest (dram, cycles_active, sys/gpc clocks, inst_executed_realtime, pcie, nvl, throughput):"
  grep -E "^BASE " "$out/pm_probe_list.txt" |
    grep -E "dram|cycles_active|__cycles_elapsed|gpu__time|inst_executed_realtime|pcie|nvl|throughput" | head -n 80
fi

section "pm_probe variants"
d=(--duration-ms 1000)  # most variants: 1 s of workload (the default run has 2 s)
# NVIDIA's pm_sampling sample (CUDA 13.0) reproduced: its metrics, 10 us interval, 512 MiB, busy decode loop with a
# reset after every decode, decode thread started before Start and joined after Stop, no decode after that, context
# created after Enable, its ~15 ms workload. Then with one of those changed.
nv=(--metrics gr__cycles_active.avg,gr__cycles_elapsed.max,gpu__time_duration.sum,sm__inst_executed_realtime.avg.per_cycle_active,sm__cycles_active.avg
  --interval 10000 --hwbuf-mib 512 --max-samples 10000 --decode-period-ms 0 --reset always --ctx-after-enable
  --workload nvsample --idle-ms 0)
variant default
variant nvidia_exact "${nv[@]}" --thread-around-start-stop --no-drain
variant nvidia_exact_drain "${nv[@]}" --thread-around-start-stop
variant nvidia_exact_inside "${nv[@]}" --no-drain
variant nvidia_exact_small_image "${nv[@]}" --thread-around-start-stop --no-drain --max-samples 500
variant nvsample_default --workload nvsample
variant range_check --range-check
variant decode_end "${d[@]}" --decode end
variant decode_end_512m "${d[@]}" --decode end --hwbuf-mib 512
variant no_profiler_init "${d[@]}" --no-profiler-init
variant busy_reset_always "${d[@]}" --decode-period-ms 0 --reset always
variant kineto_like "${d[@]}" --interval 1000000 --append latest --max-samples 1024 --reset always
variant reset_always_100ms "${d[@]}" --reset always --decode-period-ms 100 --max-samples 5000
variant decode_before_start "${d[@]}" --decode-before-start
variant ctx_after_enable "${d[@]}" --ctx-after-enable
variant cdi_before_setconfig "${d[@]}" --cdi-before-setconfig
variant time_10us "${d[@]}" --interval 10000
variant time_1ms "${d[@]}" --interval 1000000
hz=$(awk '/^SYSCLK_HZ [0-9]/ {print $2; exit}' "$out/variants/default.txt" 2>/dev/null)
if [ -z "$hz" ] || [ "$(awk -v h="$hz" 'BEGIN {print (h > 1e8 && h < 1e10) ? 1 : 0}')" != 1 ]; then
  hz=1600000000
  echo "SYS clock: no SYSCLK_HZ from the default run; assuming $hz Hz for the sysclk intervals"
else
  echo "SYS clock: $hz Hz (sys__cycles_elapsed.avg.per_second, median of the default run)"
fi
cyc() { awk -v h="$hz" -v ns="$1" 'BEGIN {printf "%d", h * ns / 1e9}'; }
variant sysclk_10us "${d[@]}" --trigger sysclk --interval "$(cyc 10000)"
variant sysclk_100us "${d[@]}" --trigger sysclk --interval "$(cyc 100000)"
variant sysclk_1ms "${d[@]}" --trigger sysclk --interval "$(cyc 1000000)"
variant keep_latest "${d[@]}" --append latest
variant hwbuf_512m "${d[@]}" --hwbuf-mib 512
variant one_metric "${d[@]}" --metrics gr__cycles_active.avg
variant idle "${d[@]}" --workload none
variant tiny "${d[@]}" --workload tiny
variant decode_end_latest "${d[@]}" --decode end --append latest

# ------------------------------------------------------------------------------------------------------------ summary
section "summary"
{
  printf "%-22s %-4s %-14s %8s %13s %9s %5s %8s %8s %8s %-16s %12s %-20s %s\n" variant rc status samples loop/drain \
    overflow oom decodes partial max_pop "reasons O/F/E" interval_ns domain first_error
  awk '
    {
      split("", kv)
      for (i = 2; i <= NF; i++) { p = index($i, "="); if (p > 1) kv[substr($i, 1, p - 1)] = substr($i, p + 1) }
      ld = ("loop_samples" in kv) ? kv["loop_samples"] "/" kv["drain_samples"] : "-"
      iv = ("interval_med_ns" in kv) ? kv["interval_med_ns"] : "-"
      printf "%-22s %-4s %-14s %8s %13s %9s %5s %8s %8s %8s %-16s %12s %-20s %s\n", kv["label"], \
        ("rc" in kv) ? kv["rc"] : "-", kv["status"], ("samples" in kv) ? kv["samples"] : "-", ld, \
        ("overflow_decodes" in kv) ? kv["overflow_decodes"] : "-", ("oom" in kv) ? kv["oom"] : "-", \
        ("decodes" in kv) ? kv["decodes"] : "-", ("partial_decodes" in kv) ? kv["partial_decodes"] : "-", \
        ("max_populated" in kv) ? kv["max_populated"] : "-", ("reasons" in kv) ? kv["reasons"] : "-", iv, \
        ("domain" in kv) ? kv["domain"] : "-", ("first_error" in kv) ? kv["first_error"] : "-"
    }' "$results"
  for s in ${nv_summary[@]+"${nv_summary[@]}"}; do echo "$s"; done
  echo "(overflow = decodes that reported overflow=1; oom = decodes that returned CUPTI_ERROR_OUT_OF_MEMORY; partial ="
  echo " decodes that left populated > completed samples in the image; loop/drain = samples from decodes during"
  echo " collection / after stop; domain = the clock the sample timestamps match best)"
} | tee "$out/summary.txt"
echo "done in ${SECONDS}s; everything is in $out (pm_probe.log, summary.txt, variants/, nvidia_sample_src/, nvidia_sample_runs/)"
exec 1>&- 2>&-
wait "$tee_pid" 2>/dev/null
exit 0
