#!/usr/bin/env bash
# Nsight Compute profiles of the TBE kernels, ours and FBGEMM's, on the two shapes issue 12
# attacks first (gpu/tbe_ncu.py); run by `gpu/run_all.sh tbe_ncu` with OUT set. Writes per case
# <case>.ncu-rep, <case>.raw.csv (every collected metric), <case>.log, and ncu_summary.md (per
# kernel: time, DRAM throughput, L2/L1 hit rates, achieved occupancy, registers, top stalls).
set -u
OUT=${OUT:?set OUT}
command -v ncu >/dev/null || { echo "tbe_ncu: ncu not found" >&2; exit 2; }
ncu --version | tail -1
python3 -c "from runtime.kernels import cuda; cuda.load()" || exit 2  # build outside the profiler
SECTIONS=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats
          --section LaunchStats)
# the embedding kernels only (the sorts' times are in the benchmark's kernel breakdown)
KERNELS='regex:pooled_forward|update_kernel|chunk_sum|linearize|split_embedding|warp_per_row|cta_per_row'
for case in zipf_fwd:60 d64_train:170; do  # case:seconds (the part has 240 s)
    limit=${case#*:} case=${case%:*}
    echo "=== $case"
    timeout "$limit" ncu --clock-control none --nvtx --nvtx-include "prof/" --kernel-name "$KERNELS" \
        --print-kernel-base demangled "${SECTIONS[@]}" --metrics dram__bytes_read.sum,dram__bytes_write.sum \
        -f -o "$OUT/$case" python3 gpu/tbe_ncu.py --case "$case" >"$OUT/$case.log" 2>&1
    echo "ncu rc=$?"; tail -n 5 "$OUT/$case.log"
    if [ -f "$OUT/$case.ncu-rep" ]; then
        ncu -i "$OUT/$case.ncu-rep" --page raw --csv --print-kernel-base demangled >"$OUT/$case.raw.csv" 2>&1
    fi
done
python3 gpu/ncu_summary.py "$OUT"/*.raw.csv | tee "$OUT/ncu_summary.md"
