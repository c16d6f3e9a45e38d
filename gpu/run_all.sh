#!/usr/bin/env bash
# Everything GPU-side in one place: build, test and benchmark, results under $OUT.
#
#   bash gpu/run_all.sh [PART...]        # default: every part but pipelines2 (2 GPUs), in this order
#
# Parts: env, kernels (build + GPU correctness tests of the TBE kernels), tbe (kernel benchmark),
# pipetests (GPU tests of the pipelines and the batch type), pipelines (the 1-GPU pipeline
# benchmark, every preset, interleaved rounds, traces, diagnostics: <= 9 min; bench/bench_pipelines.py),
# pipelines2 (the same on 2 GPUs through torchrun), issue5 (delta tracking / writeback / in-place
# copy: GPU tests, benchmark, traces, snapshots and the explain proof's pairs: <= 9 min),
# snapshot (sample allocator snapshots).
# Each part runs with its own time limit and its own output folder; one failing part does not
# stop the others. The device tool brings back at most 8 files of at most 16 MiB, so each part's
# folder is packed into $OUT/<part>.tar.gz (split into <part>.tar.gz.part-aa, -ab, ... when larger
# than 15 MiB: `cat <part>.tar.gz.part-* | tar xz`), with every log's tail in $OUT/summary.txt.
set -u
OUT=${OUT:?set OUT to the results folder}
WORK=${WORK:-/tmp/tracekit-gpu}
mkdir -p "$WORK" "$OUT"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# NVLink multicast stays off on shared hosts (the device tool's rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One build cache for the CUDA extension, kept while the machine stays warm.
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/tracekit-torch-ext}

part() {  # part NAME SECONDS COMMAND...
    local name=$1 limit=$2; shift 2
    local dir="$WORK/$name"; mkdir -p "$dir"
    local t0=$SECONDS
    echo "=== $name (limit ${limit}s): $*"
    OUT="$dir" timeout "$limit" "$@" >"$dir/log.txt" 2>&1
    local rc=$?
    printf '%-11s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$OUT/summary.txt"
    tail -n 25 "$dir/log.txt"
    tar czf "$OUT/$name.tar.gz" -C "$WORK" "$name"
    if [ "$(stat -c %s "$OUT/$name.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
        split -b 15M "$OUT/$name.tar.gz" "$OUT/$name.tar.gz.part-" && rm "$OUT/$name.tar.gz"
    fi
}

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(env kernels tbe pipetests pipelines issue5 snapshot)
for p in "${parts[@]}"; do
    case "$p" in
    env) part env 60 bash -c 'date -u; nvidia-smi; python3 -c "import torch,sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.device_count())"; nvcc --version' ;;
    kernels) part kernels 420 python3 -m pytest -q -p no:cacheprovider -o addopts= gpu/test_kernels.py ;;
    tbe) part tbe 420 bash -c 'python3 bench/bench_tbe.py --out "$OUT"' ;;
    pipelines) part pipelines 540 bash -c 'python3 bench/bench_pipelines.py --gpus 1 --budget-s 450 --out "$OUT"' ;;
    pipelines2) part pipelines2 540 bash -c 'python3 bench/bench_pipelines.py --gpus 2 --budget-s 450 --out "$OUT"' ;;
    pipetests) part pipetests 420 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/runtime/test_pipelines_gpu.py tests/runtime/test_batch.py ;;
    issue5) part issue5 540 python3 gpu/issue5_run.py ;;
    snapshot) part snapshot 180 bash -c 'python3 gpu/snapshot_sample.py --out "$OUT"' ;;
    *) echo "unknown part: $p" >&2 ;;
    esac
done
cat "$OUT/summary.txt"
