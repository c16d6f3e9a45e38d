#!/usr/bin/env bash
# Everything GPU-side in one place: build, test and benchmark, results under $OUT.
#
#   bash gpu/run_all.sh [PART...]        # default: every part but pipelines2 (2 GPUs), in this order
#   bash gpu/run_all.sh --dry-run [PART...]   # (or RUN_ALL_DRY=1) each part's name, limit and command, one
#                                             # line each, nothing run, written or packed; OUT not needed
#
# The device tool allows 10 minutes a command: pipelines2, issue5 and pipelines take up to 9 each
# (pipelines: its 480 s budget, a fresh machine's TBE build included), so each goes in a call of its own
# (bash gpu/run_all.sh pipelines; ... issue5).
#
# Parts: env, kernels (build, gpu/tbe_smoke.py (which kernel variants crash: those are left out of
# the tests and of part tbe), GPU correctness tests of the TBE kernels, every kernel variant, and
# the agreement with FBGEMM when fbgemm_gpu imports), tbe (kernel benchmark: ours (every variant)
# vs FBGEMM vs torch, <= 5 min), tbe_ncu (Nsight Compute profiles of ours and FBGEMM's kernels on
# the two shapes issue 12 attacks first, <= 4 min), largetrace (bench/common/large_trace.py: the
# ~780 MB-JSON DLRM trace the loader, explain and many-ranks benchmarks read, ~53 MB gzipped, so
# it comes back split in parts: give it a call with little else), pipetests (GPU tests of the pipelines and the
# batch type), pipelines (the 1-GPU pipeline benchmark, every preset, interleaved rounds, traces:
# ~8 min, <= 9; bench/pipelines.py; two calls compared by bench/pipelines_compare.py), pipelines2 (the same on 2 GPUs through
# torchrun), issue5 (delta tracking / writeback / in-place copy: GPU tests, benchmark, traces,
# snapshots and the explain proof's pairs: <= 9 min), snapshot (sample allocator snapshots),
# ranks2 (2 GPUs, not in the default: gpu/ranks_straggler.py, two ranks on real NCCL with a
# planted straggler and an imbalanced all-to-all, for tracekit analyze DIR to find; ~1 min),
# hostscan (bench/host_scan.py: each CPU's speed over 20 s, hidden SMT siblings, torch's intra-op
# threads; ~1 min), pipeprobe (the pipeline benchmark on the plan in $PIPEPROBE_PLAN, no traces,
# ${PIPEPROBE_S:-240} s, more options in $PIPEPROBE_ARGS: a question about a few variants, not the
# results of record), hostprof (bench/pipelines_host_profile.py: a preset's variants under cProfile, host
# time by function against the first variant; $HOSTPROF_PRESET, $HOSTPROF_VARIANTS,
# $HOSTPROF_ROUNDS; ~3 min), tbe_bw (gpu/tbe_bw.py: our TBE kernels at six of bench.tbe's shapes,
# traced with record_shapes and timed the benchmark's way, for python -m bench.tbe_bw_check to compare
# tracekit's embedding bandwidth with; <= 90 s once part kernels (or tbe, or tbe_build) has built the
# kernels), tbe_build (the TBE extension built, or loaded from its cache, once
# before the parts that run it on several ranks at once; ~60 s on a fresh machine, ~5 s warm),
# overhead1 / overhead2 (issue 24, the profiler's cost: bench/pipelines.py on 1 / 2 GPUs,
# SparseDist and FusedSparseDist of four / two presets in interleaved untraced rounds, then one
# trace run of each under each profiler option set; <= 240 / 200 s), jobs4 (issue 25: 4 ranks on
# NCCL, gpu/ranks_jobs.py: hot tables on one rank, a planted host delay and the balanced job,
# interleaved untraced rounds and every rank traced; <= 240 s), torchrec (issue 24: TorchRec
# 1.6.1's own benchmark_train_pipeline, gpu/torchrec_bench.py, after installing fbgemm_gpu from
# the parts in $FBPARTS (default /tmp/fbparts: part-aa, part-ab, part-ac, sha256, install.sh) and
# the wheels in .whl/torchrec into /tmp/site; <= 330 s; $TORCHREC_ARGS: more flags, e.g. --plan). gpu/CALLS.md: the calls that run them.
# holdout1 / holdout2 / jobs2 (held out, 2026-11-27 session 2: presets never used to fit the overhead model,
# the replay or the what-ifs: bench.pipelines on 1 GPU (multitask_b8k, multitask_h32, multitask_p0,
# dense_b16k; profiler options default, shapes, stack) and 2 GPUs (multitask, dense_b16k, multitask_b8k),
# and gpu/ranks_jobs.py on 2 ranks (jobs_mid with rank 1 +2 ms, jobs_hot with rank 0 +4 ms); <= 290 s each);
# jobs4m: the same held-out preset jobs_mid on 4 ranks, rank 3 +2.5 ms (<= 200 s).
# holdout3a / holdout3b / jobs2n / jobs4n (held out, 2026-11-27 session 3, collected before that session's
# model changes): bench.pipelines on 1 GPU (multitask_b12k, multitask_h64_b8k, dense_b8k; options default,
# shapes, stack; <= 270 s) and 2 GPUs (the same presets, default; <= 250 s); gpu/ranks_jobs.py with jobs_lite
# on 2 ranks (rank 0 +3 ms; <= 170 s) and on 4 ranks (rank 1 +1.5 ms; <= 200 s).
# holdout4a / holdout4b / jobs2o / jobs4o (held out, 2026-11-27 session 4, collected before that session's
# model changes): bench.pipelines on 1 GPU (multitask_b6k, multitask_h16_b24k, dense_b12k; options default,
# shapes, stack; <= 270 s) and 2 GPUs (the same presets, default; <= 250 s); gpu/ranks_jobs.py with jobs_wide
# on 2 ranks (rank 1 +2.5 ms; <= 170 s) and on 4 ranks (rank 2 +2 ms; <= 200 s).
# jobs2r / jobs4r (the job proof's reference, session 5): gpu/ranks_jobs.py with jobs_wide on 2 ranks (rank 1
# +2.5 ms) and 4 ranks (rank 2 +2 ms), as jobs2o / jobs4o, then --rounds-after-traces 10: the timed rounds again
# once every case is traced, the saving measured in the process as its traced runs left it (their own untraced
# steps ran 1.0-1.5x the rounds' before any trace in session 4, more for each later case); <= 230 / 260 s.
# holdout6a / holdout6b / jobs2q / jobs4q (held out, 2026-11-28 session 6, collected before that session's
# model changes): bench.pipelines on 1 GPU (multitask_b20k, multitask_h48_b12k, dense_b32k; options default,
# shapes, stack; <= 270 s) and 2 GPUs (the same presets, default; <= 250 s); gpu/ranks_jobs.py with jobs_tall
# on 2 ranks (rank 1 +3.5 ms) and 4 ranks (rank 0 +2.5 ms), each with 10 rounds after the traces (<= 230 / 260 s).
# holdout7a / holdout7b / jobs2s / jobs4s (held out, 2026-11-28 session 7, collected before that session's
# model changes): bench.pipelines on 1 GPU (multitask_b24k, multitask_h80_b14k, dense_b20k; options default,
# shapes, stack; <= 270 s) and 2 GPUs (the same presets, default; <= 250 s); gpu/ranks_jobs.py with jobs_flat
# on 2 ranks (rank 0 +3 ms) and 4 ranks (rank 3 +2 ms), each with 10 rounds after the traces (<= 230 / 260 s).
# holdout8a / holdout8b / jobs2t / jobs4t (held out, 2026-11-28 session 8, collected before that session's
# model changes): bench.pipelines on 1 GPU (multitask_b28k, multitask_h112_b16k, dense_b16k; options default,
# shapes, stack; <= 270 s) and 2 GPUs (the same presets, default; <= 250 s); gpu/ranks_jobs.py with jobs_slim
# on 2 ranks (rank 1 +2.5 ms) and 4 ranks (rank 2 +1.5 ms), each with 10 rounds after the traces (<= 230 / 260 s).
# holdout9a / holdout9b / jobs2u (held out, 2026-11-28 session 9, collected before that session's model
# changes): bench.pipelines on 1 GPU (multitask_b18k, multitask_h56_b22k, dense_b28k; options default, shapes,
# stack; <= 270 s) and 2 GPUs (the same presets, default; <= 250 s); gpu/ranks_jobs.py with jobs_lean on 2
# ranks (rank 0 +3 ms), with 10 rounds after the traces (<= 230 s).
# holdout10a / holdout10b / jobs2v / jobs4v (held out, 2026-11-28 session 10, collected before that session's
# model changes): bench.pipelines on 1 GPU (multitask_b14k, multitask_h40_b26k, dense_b10k; options default,
# shapes, stack; <= 270 s) and 2 GPUs (the same presets, default; <= 250 s); gpu/ranks_jobs.py with jobs_trim
# on 2 ranks (rank 1 +2 ms) and 4 ranks (rank 3 +2.5 ms), each with 10 rounds after the traces (<= 230 / 260 s).
# holdout11a / holdout11b / jobs2w / jobs4w (held out, 2026-11-28 session 11, collected before that session's
# model changes): bench.pipelines on 1 GPU (multitask_b22k, multitask_h24_b30k, dense_b6k; options default,
# shapes, stack; <= 270 s) and 2 GPUs (the same presets, default; <= 250 s); gpu/ranks_jobs.py with jobs_keen
# on 2 ranks (rank 0 +2.5 ms) and 4 ranks (rank 1 +2 ms), each with 10 rounds after the traces (<= 230 / 260 s).
# refit10b (released presets re-collected to fit on, session 11: set 10's traces did not outlive their machine):
# bench.pipelines on 2 GPUs, multitask_b14k and multitask_h40_b26k (set 10's 2-GPU multitask pairs; b14k's
# FusedSparseDist saving was under-predicted on the job's graph), default options; <= 230 s.
# holdout12a / holdout12b / jobs2x / jobs4x (held out, 2026-11-28 session 12, collected before that session's
# model changes): bench.pipelines on 1 GPU (multitask_b26k, multitask_h72_b18k, dense_b14k; options default,
# shapes, stack; <= 270 s) and 2 GPUs (the same presets, default; <= 250 s); gpu/ranks_jobs.py with jobs_bold
# on 2 ranks (rank 1 +3 ms) and 4 ranks (rank 2 +1.5 ms), each with 10 rounds after the traces (<= 230 / 260 s).
# refit8b (released presets re-collected to fit on, session 9: set 8's held-out traces did not outlive their
# machine): bench.pipelines on 2 GPUs, multitask_b28k and multitask_b24k (the 2-GPU FusedSparseDist pairs the
# job's graph under-predicts, the SparseDist step whose untraced estimate was +51.8 %), default options; <= 230 s.
# refit9b (released presets re-collected to fit on, session 10): bench.pipelines on 2 GPUs, multitask_h56_b22k and
# multitask_b28k (2-GPU FusedSparseDist pairs the job's graph under-predicted in sets 9 and 8), default options;
# <= 230 s.
# jobs4f6 (the job proof's steady state, session 8): gpu/ranks_jobs.py with jobs_flat on 4 ranks (rank 3 +2 ms),
# as jobs4s, but 6 profiled steps (the first pinned, five counted) and 10 rounds after the traces: whether
# the straggler what-if's saving, read past the first counted step's transient, holds where the traced job's
# bound is another rank's slower host (bench/NOTES-ranks.md, "FusedSparseDist on every rank"; <= 300 s).
# cudagraph (gpu/cuda_graph_trace.py: a small MLP's step captured in a CUDA graph and replayed,
# and the same eagerly, each traced; for explain's CUDA-graph check on a real trace; <= 1 min).
# The parts of one shape are one function call each (below `part`): pipelines_part (bench.pipelines,
# 2 passes, >= 6 rounds: overhead1/2), holdout_part (a held-out set's presets on 1 GPU or 2: holdout1/2,
# holdoutNa/b), refit_part (refitNb), jobs_part (gpu/ranks_jobs.py: jobs2n ... jobs4f6) and jobs_after_part
# (the same, 100 s of rounds and 10 after the traces: jobs2r, jobs4r, jobs4p, jobs2q onwards); a new set is a
# line of each; `--dry-run` lists the commands they give.
# Each part runs with its own time limit and its own output folder; one failing part does not
# stop the others. The device tool brings back at most 8 files of at most 16 MiB, so each part's
# folder is packed into $OUT/<part>.tar.gz (split into <part>.tar.gz.part-aa, -ab, ... when larger
# than 15 MiB: `cat <part>.tar.gz.part-* | tar xz`), with every log's tail in $OUT/summary.txt.
set -u
shopt -s extglob
DRY=${RUN_ALL_DRY:-}
[ "${1:-}" = --dry-run ] && { DRY=1; shift; }
[ -n "$DRY" ] && OUT=${OUT:-'$OUT'}
OUT=${OUT:?set OUT to the results folder}
WORK=${WORK:-/tmp/tracekit-gpu}
[ -n "$DRY" ] || mkdir -p "$WORK" "$OUT"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# NVLink multicast stays off on shared hosts (the device tool's rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One build cache for the CUDA extension, kept while the machine stays warm.
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/tracekit-torch-ext}
# TBE kernel variants that crashed in gpu/tbe_smoke.py (part kernels writes it, part tbe reads
# it, or runs the smoke itself when it is missing): left out of the tests and the benchmark
SKIP_FILE="$WORK/tbe_skip_variants.txt"

part() {  # part NAME SECONDS COMMAND...
    local name=$1 limit=$2; shift 2
    if [ -n "$DRY" ]; then  # its words quoted, on one line: a script's continued lines joined
        local words=() w
        for w in "$@"; do words+=("${w//\\$'\n'*( )/}"); done
        printf '%s %s %s\n' "$name" "$limit" "${words[*]@Q}"
        return
    fi
    local dir="$WORK/$name"; rm -rf "$dir"; mkdir -p "$dir"  # a warm (or reused) machine keeps /tmp: no stale outputs
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

# fbgemm_gpu, when the caller put it on PYTHONPATH: its version and whether its ops load
fbgemm_check='import torch, fbgemm_gpu; torch.ops.fbgemm.asynchronous_complete_cumsum; print("fbgemm_gpu", fbgemm_gpu.__version__, "ops loaded")'

pairs() {  # pairs PRESET...: SparseDist and FusedSparseDist of each preset, as bench.pipelines' --plan
    local IFS=,
    set -- "${@/%/:sparse+fused}"
    echo "$*"
}

pipelines_part() {  # pipelines_part NAME LIMIT GPUS BUDGET PLAN [OPTION...]: bench.pipelines on GPUS GPUs,
    # the PLAN's variants in interleaved untraced rounds (2 passes, at least 6 rounds, BUDGET s), then traced
    local name=$1 limit=$2 gpus=$3 budget=$4 plan=$5; shift 5
    part "$name" "$limit" bash -c "python3 -m bench.pipelines --gpus $gpus --passes 2 --budget-s $budget --min-rounds 6 --plan $plan ${*:+$* }--out \"\$OUT\""
}

holdout_part() {  # holdout_part NAME GPUS PRESET...: a held-out set's presets, SparseDist and FusedSparseDist;
    # on 1 GPU under the profiler options default, shapes and stack, SparseDist's windows (<= 270 s);
    # on 2 GPUs under the default options (<= 250 s)
    local name=$1 gpus=$2; shift 2
    if [ "$gpus" = 1 ]; then
        pipelines_part "$name" 270 1 150 "$(pairs "$@")" --profile-options default,shapes,stack \
                       --window-variants sparse --window-trace-max-mb 3 --window-traces-max-mb 10
    else
        pipelines_part "$name" 250 2 170 "$(pairs "$@")" --profile-options default
    fi
}

refit_part() {  # refit_part NAME PRESET...: released presets re-collected to fit on, 2 GPUs, default options (<= 230 s)
    local name=$1; shift
    pipelines_part "$name" 230 2 120 "$(pairs "$@")" --profile-options default
}

jobs_part() {  # jobs_part NAME LIMIT RANKS PRESET DELAY_RANK DELAY_MS [OPTION...]: gpu/ranks_jobs.py on RANKS
    # ranks through torchrun, a host delay of DELAY_MS planted on DELAY_RANK
    local name=$1 limit=$2 ranks=$3 preset=$4 rank=$5 ms=$6; shift 6
    part "$name" "$limit" bash -c "torchrun --standalone --nproc-per-node $ranks gpu/ranks_jobs.py --preset $preset --delay-rank $rank --delay-ms $ms ${*:+$* }--out \"\$OUT\""
}

jobs_after_part() {  # jobs_after_part NAME RANKS PRESET DELAY_RANK DELAY_MS: jobs_part, 100 s of rounds and 10
    # rounds after the traces (<= 230 s on 2 ranks, 260 on 4)
    jobs_part "$1" "$(( $2 == 2 ? 230 : 260 ))" "$2" "$3" "$4" "$5" --budget-s 100 --rounds-after-traces 10
}

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(env kernels tbe tbe_ncu pipetests pipelines issue5 snapshot)
for p in "${parts[@]}"; do
    case "$p" in
    env) part env 60 bash -c 'date -u; nvidia-smi -L; nvidia-smi; ls -l /tmp/fbparts 2>&1; ls /tmp/tracekit-torch-ext 2>&1; python3 -c "import torch,sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.device_count())"; nvcc --version' ;;
    kernels) part kernels 480 bash -c "python3 -c '$fbgemm_check' || echo 'fbgemm_gpu: not importable (the agreement test skips)';
                                       python3 -c 'from runtime.kernels import cuda; cuda.load(verbose=False)' &&
                                       python3 gpu/tbe_smoke.py --out $SKIP_FILE; cp $SKIP_FILE \"\$OUT\"/ 2>/dev/null;
                                       TBE_SKIP_VARIANTS=\$(cat $SKIP_FILE 2>/dev/null) python3 -m pytest -q -p no:cacheprovider -o addopts= gpu/test_kernels.py" ;;
    tbe) part tbe 300 bash -c "python3 -c '$fbgemm_check' || echo 'fbgemm_gpu: not importable';
                               [ -f $SKIP_FILE ] || python3 gpu/tbe_smoke.py --out $SKIP_FILE;
                               echo \"TBE_SKIP_VARIANTS=\$(cat $SKIP_FILE)\";
                               TBE_SKIP_VARIANTS=\$(cat $SKIP_FILE) python3 -m bench.tbe --budget-s 240 --out \"\$OUT\"" ;;
    tbe_ncu) part tbe_ncu 240 bash gpu/tbe_ncu.sh ;;
    pipelines) part pipelines 580 bash -c 'python3 -m bench.pipelines --gpus 1 --budget-s 480 --out "$OUT"' ;;
    pipelines2) part pipelines2 540 bash -c 'python3 -m bench.pipelines --gpus 2 --budget-s 450 --out "$OUT"' ;;
    ranks2) part ranks2 240 bash -c 'torchrun --nproc_per_node 2 --master_port 29531 gpu/ranks_straggler.py --out "$OUT/job"' ;;
    pipetests) part pipetests 420 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/runtime/test_pipelines_gpu.py tests/runtime/test_batch.py ;;
    issue5) part issue5 540 python3 gpu/issue5_run.py ;;
    largetrace) part largetrace 420 bash -c 'python3 -m bench.common.large_trace --out "$OUT"' ;;
    hostscan) part hostscan 120 bash -c 'python3 -m bench.host_scan --seconds 20 --out "$OUT/host_scan.json"' ;;
    hostprof) part hostprof 420 bash -c 'python3 -m bench.pipelines_host_profile --preset ${HOSTPROF_PRESET:-multitask_b4k} --variants ${HOSTPROF_VARIANTS:-sparse,fused,fused_current_stream} --rounds ${HOSTPROF_ROUNDS:-8} --out "$OUT"' ;;
    pipeprobe) part pipeprobe 420 bash -c 'python3 -m bench.pipelines --gpus 1 --budget-s ${PIPEPROBE_S:-240} --profile-steps 0 --plan "${PIPEPROBE_PLAN:?}" ${PIPEPROBE_ARGS:-} --out "$OUT"' ;;
    tbe_bw) part tbe_bw 90 bash -c 'python3 gpu/tbe_bw.py --budget-s 60 --out "$OUT"' ;;
    cudagraph) part cudagraph 120 bash -c 'python3 gpu/cuda_graph_trace.py --out "$OUT"' ;;
    snapshot) part snapshot 180 bash -c 'python3 gpu/snapshot_sample.py --out "$OUT"' ;;
    tbe_build) part tbe_build 200 python3 -c 'import time; t = time.time(); from runtime.kernels import cuda; cuda.load(verbose=False); print(f"TBE extension ready in {time.time() - t:.1f} s")' ;;
    overhead1) pipelines_part overhead1 260 1 180 "$(pairs multitask_b32k multitask_b4k multitask dense_heavy)" \
                   --profile-options default,no_memory,no_sync,shapes,torchrec,stack --window-variants sparse --window-trace-max-mb 3 --window-traces-max-mb 16 ;;
    overhead2) pipelines_part overhead2 215 2 160 "$(pairs multitask_b32k multitask_b4k)" \
                   --profile-options default,no_memory,no_sync,shapes,stack --window-variants sparse --window-trace-max-mb 3 --window-traces-max-mb 10 ;;
    holdout1) holdout_part holdout1 1 multitask_b8k multitask_h32 multitask_p0 dense_b16k ;;
    holdout2) holdout_part holdout2 2 multitask dense_b16k multitask_b8k ;;
    jobs2) part jobs2 290 bash -c 'torchrun --standalone --nproc-per-node 2 gpu/ranks_jobs.py --preset jobs_mid --delay-rank 1 --delay-ms 2 --budget-s 110 --out "$OUT/mid" &&
                  torchrun --standalone --nproc-per-node 2 gpu/ranks_jobs.py --preset jobs_hot --delay-rank 0 --delay-ms 4 --budget-s 60 --min-rounds 4 --out "$OUT/hot"' ;;
    jobs4m) jobs_part jobs4m 200 4 jobs_mid 3 2.5 --budget-s 90 ;;
    holdout3a) holdout_part holdout3a 1 multitask_b12k multitask_h64_b8k dense_b8k ;;
    holdout3b) holdout_part holdout3b 2 multitask_b12k multitask_h64_b8k dense_b8k ;;
    jobs2n) jobs_part jobs2n 170 2 jobs_lite 0 3 --budget-s 100 ;;
    jobs4n) jobs_part jobs4n 200 4 jobs_lite 1 1.5 --budget-s 100 ;;
    holdout4a) holdout_part holdout4a 1 multitask_b6k multitask_h16_b24k dense_b12k ;;
    holdout4b) holdout_part holdout4b 2 multitask_b6k multitask_h16_b24k dense_b12k ;;
    jobs2o) jobs_part jobs2o 170 2 jobs_wide 1 2.5 --budget-s 100 ;;
    jobs4o) jobs_part jobs4o 200 4 jobs_wide 2 2 --budget-s 100 ;;
    holdout5a) holdout_part holdout5a 1 multitask_b10k multitask_h96_b20k dense_b24k ;;
    holdout5b) holdout_part holdout5b 2 multitask_b10k multitask_h96_b20k dense_b24k ;;
    jobs2p) jobs_part jobs2p 170 2 jobs_deep 0 1.5 --budget-s 100 ;;
    jobs2r) jobs_after_part jobs2r 2 jobs_wide 1 2.5 ;;
    jobs4r) jobs_after_part jobs4r 4 jobs_wide 2 2 ;;
    jobs4p) jobs_after_part jobs4p 4 jobs_deep 3 1.5 ;;
    holdout6a) holdout_part holdout6a 1 multitask_b20k multitask_h48_b12k dense_b32k ;;
    holdout6b) holdout_part holdout6b 2 multitask_b20k multitask_h48_b12k dense_b32k ;;
    jobs2q) jobs_after_part jobs2q 2 jobs_tall 1 3.5 ;;
    jobs4q) jobs_after_part jobs4q 4 jobs_tall 0 2.5 ;;
    holdout7a) holdout_part holdout7a 1 multitask_b24k multitask_h80_b14k dense_b20k ;;
    holdout7b) holdout_part holdout7b 2 multitask_b24k multitask_h80_b14k dense_b20k ;;
    jobs2s) jobs_after_part jobs2s 2 jobs_flat 0 3 ;;
    jobs4s) jobs_after_part jobs4s 4 jobs_flat 3 2 ;;
    holdout8a) holdout_part holdout8a 1 multitask_b28k multitask_h112_b16k dense_b16k ;;
    holdout8b) holdout_part holdout8b 2 multitask_b28k multitask_h112_b16k dense_b16k ;;
    jobs2t) jobs_after_part jobs2t 2 jobs_slim 1 2.5 ;;
    jobs4t) jobs_after_part jobs4t 4 jobs_slim 2 1.5 ;;
    holdout9a) holdout_part holdout9a 1 multitask_b18k multitask_h56_b22k dense_b28k ;;
    holdout9b) holdout_part holdout9b 2 multitask_b18k multitask_h56_b22k dense_b28k ;;
    jobs2u) jobs_after_part jobs2u 2 jobs_lean 0 3 ;;
    holdout10a) holdout_part holdout10a 1 multitask_b14k multitask_h40_b26k dense_b10k ;;
    holdout10b) holdout_part holdout10b 2 multitask_b14k multitask_h40_b26k dense_b10k ;;
    jobs2v) jobs_after_part jobs2v 2 jobs_trim 1 2 ;;
    jobs4v) jobs_after_part jobs4v 4 jobs_trim 3 2.5 ;;
    holdout11a) holdout_part holdout11a 1 multitask_b22k multitask_h24_b30k dense_b6k ;;
    holdout11b) holdout_part holdout11b 2 multitask_b22k multitask_h24_b30k dense_b6k ;;
    jobs2w) jobs_after_part jobs2w 2 jobs_keen 0 2.5 ;;
    jobs4w) jobs_after_part jobs4w 4 jobs_keen 1 2 ;;
    refit10b) refit_part refit10b multitask_b14k multitask_h40_b26k ;;
    holdout12a) holdout_part holdout12a 1 multitask_b26k multitask_h72_b18k dense_b14k ;;
    holdout12b) holdout_part holdout12b 2 multitask_b26k multitask_h72_b18k dense_b14k ;;
    jobs2x) jobs_after_part jobs2x 2 jobs_bold 1 3 ;;
    jobs4x) jobs_after_part jobs4x 4 jobs_bold 2 1.5 ;;
    refit8b) refit_part refit8b multitask_b28k multitask_b24k ;;
    refit9b) refit_part refit9b multitask_h56_b22k multitask_b28k ;;
    jobs4f6) jobs_part jobs4f6 300 4 jobs_flat 3 2 --profile-steps 6 --budget-s 100 --rounds-after-traces 10 ;;
    jobs4) part jobs4 250 bash -c 'torchrun --standalone --nproc-per-node 4 gpu/ranks_jobs.py --budget-s 190 --out "$OUT"' ;;
    torchrec) part torchrec 340 bash -c 'set -e; fb=${FBPARTS:-/tmp/fbparts}; ls -l "$fb";
                  t=$SECONDS; bash "$fb/install.sh" "$fb" /tmp/site;
                  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/torchrec/*.whl;
                  export PYTHONPATH=/tmp/site:$PYTHONPATH; python3 -c "$0"; echo "install: $((SECONDS - t)) s";
                  python3 gpu/torchrec_bench.py --budget-s $((300 - (SECONDS - t))) ${TORCHREC_ARGS:-} --out "$OUT"' "$fbgemm_check" ;;
    *) echo "unknown part: $p" >&2 ;;
    esac
done
[ -n "$DRY" ] || cat "$OUT/summary.txt"
