"""Benchmark of the training pipelines, measured so that two runs agree (bench/common/method.py).

    python3 -m bench.pipelines --gpus 1 --out $OUT            # the plan on one GPU (~4.5 min on an H200)
    python3 -m bench.pipelines --gpus 2 --out $OUT            # 2 GPUs (relaunches itself under torchrun)
    python -m bench.pipelines --device cpu --plan tiny:sparse+fused --rounds 2 --min-rounds 2 --out /tmp/b
                                                                    # smoke test of the script, CPU (gloo)
    python3 -m bench.pipelines_compare A/results.json B/results.json  # do two calls agree?

A *plan* is a list of presets (model, data, dense optimizer, main-stream priority), each with the
variants to compare (Base, SparseDist, FusedSparseDist with each lookup stream and placement,
SemiSync, SparseDist with the in-place copy); SparseDist is the reference. For each preset:

1. **Setup, once**: the host batches (``SyntheticLoader``) and the model (``runtime.session.
   Session``: 26 tables of 1M x 128 are 13 GB) are built once and reused by every run of every
   variant; each run puts the model back to its initial state in place. Their cost is recorded.
2. **Rounds**: the plan runs ``--passes`` times over (6: each preset's rounds spread over the
   whole call, since the host's speed moves over minutes), each pass in a process of its own (the
   process is what repeats: an offset one process keeps for its life, the next does not share;
   with 3 passes the interval's ends were the worst pass's own median, with 6 one slow pass
   moves them less).
   In each pass a warm-up round (every variant once, discarded), then that pass's share of R
   timed rounds (R even, ``--min-rounds`` <= R <= the preset's plan, as many as the time budget
   allows). In each round every variant runs once, in mirrored pairs of rotated orders
   (bench/common/method.py); one run = a few warm-up steps (pipeline fill, allocator growth after
   ``empty_cache``) + a few timed steps (CUDA events on the main stream) + 3 untimed tail steps
   (the pipeline drains there): 3 + 4 + 3 on the multitask presets, short so that the runs
   compared within a round are close in time. The round's figure of a variant is the median of
   its timed steps and its peak memory; ratios to SparseDist are taken within the round.
   Reported: the median over rounds with a 95 % bootstrap interval (two-stage: the passes, each
   its own process, main CPU and model, then their rounds), of the step time, the ratio, peak
   reserved and allocated memory and their ratios (bench/common/method.py).
3. **The host** (bench/common/host.py): the main thread alone on one CPU (other threads and processes of
   ours elsewhere), the cyclic GC off during each run, a host probe (us per tiny CPU op) right
   before each run and the main thread's counters over it (involuntary context switches, its
   CPU's steal and interrupt time): on the host-bound presets the step time is the host's speed,
   and the results say how much the host moved (d124cf4:bench/NOTES-pipelines.md, "Issue 13", in git history).
4. **Traces**: then one more run of each variant the plan traces (the headline's main variants,
   and what the 16k question and the explain proof need) with ``--profile-steps`` profiled steps (Kineto with ``[memory]`` and ``cuda_sync`` events:
   ``runtime.profiling``), written in the repository's layout under ``<out>/commit/`` so the lead
   can copy them in: ``sample_traces/pipelines_{N}gpu/<variant>/`` for the headline preset,
   ``.../<preset>/<variant>/`` for the others.
   With ``--profile-options default,no_memory,...`` (runtime.profiling.PROFILER_OPTIONS: the
   runtime's ``default``, ``[memory]`` and ``cuda_sync`` events on, no shapes or stacks; each
   option toggled from it: ``no_memory``, ``no_sync``, ``bare``, ``shapes`` (record_shapes),
   ``stack`` (with_stack); ``torchrec``: the set TorchRec 1.6.1's benchmark profiles with,
   record_shapes + profile_memory + with_flops + with_modules, no cuda_sync) each traced variant
   gets one trace run per option set: the profiler-overhead question (issue 24). Each run is one
   process's model and data: its warm-up steps, ``max(3, timed)`` untraced timed steps, one
   profiler warm-up step, ``--profile-steps`` traced steps, 3 tail steps; options outer,
   variants in alternating order (``--window-variants``: only these under the non-default sets).
   CUPTI is torn down after each trace (``TEARDOWN_CUPTI=1``, runtime.profiling.cupti_teardown;
   ``process.cupti_teardown`` in the results): Kineto's default leaves it attached, and before
   this every run after the first trace of a process (the second trace run of a preset, the next
   preset's rounds in the last pass) ran 5-100 % slower on the host-bound presets (that the
   teardown removes it is not yet checked on a GPU: bench/NOTES-explain.md, "The trace runs after the first"). ``--window-trace-max-mb`` / ``--window-traces-max-mb`` drop
   a non-default option's traces past a size (their counts and times stay).

   **Results for the overhead question** (``results.json``, and the same document compact in
   ``commit/bench/results/pipelines-<tag>.json``): top level ``device``, ``date_utc``,
   ``versions`` (torch, CUDA, NCCL), ``world_size``; per preset (``presets[i]``): ``spec``,
   ``summary[variant]`` (the interleaved untraced rounds: ``step`` {median, lo, hi, n} ms and
   ``ratio`` to SparseDist with its 95 % interval: the measured saving of FusedSparseDist is
   ``1 - summary.fused.ratio``, in ms ``summary.sparse.step.median * (1 - ratio)``),
   ``rounds[k].runs[variant].step_ms_median`` (each round's figure, for one's own statistics), and
   ``windows``: one entry per trace run, ``{variant, option, profiler: {memory, cuda_sync,
   record_shapes, with_stack, with_flops, with_modules}, dir (the trace folder, relative to the
   repository), trace ("kept" or why dropped), t: [start, end] s, step_ms (untraced timed steps,
   CUDA events, ms), host_step_ms (their host times: perf_counter between the ends of issuing two
   steps), traced_step_ms, traced_host_step_ms (the profiled steps), profiler_warmup_step_ms:
   [GPU, host] of the profiler's warm-up step, step_ms_median, host_probe_us (us per tiny CPU op
   right before the run), trace_counts: {events, cuda_sync, memory, kernels, by_cat: events per
   Kineto category, bytes} (rank 0's trace), ranks (2+ GPUs: each rank's step_ms, host_step_ms,
   traced_step_ms, traced_host_step_ms, profiler_warmup_step_ms)}``. On the GPU the host time of
   a step equals its GPU time once the launch queue is full (the host waits); where the host
   bounds the step (``gpu_waited_share`` near 1), the host's time is the step.

5. **Diagnostics** (``--diagnostics``, GPU, ~60 s more): why the old method's first run of a call
   was slow and its ratios moved from run to run. ``old_method``: the GPU left idle for
   ``--idle-s`` seconds, then SparseDist, FusedSparseDist and SemiSync back to back, 10 warm-up +
   40 timed steps each, P90 (the method before this one); ``fresh_tables``: the model built a
   second time (new 13 GB allocation) and SparseDist and FusedSparseDist run once more. The
   2026-11-23 run answered both (bench/NOTES-pipelines.md); off by default.

Throughout: SM/memory clocks, temperature, power and clock-event reasons from nvidia-smi (one query
between rounds at most every ``--clock-every-s``; ``--clock-log-ms`` for a sampling loop beside
the run, as the first call had), a GEMM probe (clock-bound) and a lookup probe (memory-bound, on
the preset's tables) at the same moments; per run the first step's time, the caching allocator's
device allocations during the timed steps; per process the CUDA context start, the TBE
extension's load (or build) time, the CPU model and the pinning.

Writes (rank 0) every ~15 s and at each preset's end: ``<out>/results.json`` (everything),
``<out>/results.md``, ``<out>/clocks.csv``; at the end ``<out>/commit/`` with
``bench/results/pipelines-{N}gpu-<gpu>-<date>-<HHMM>.{json,md}``, the sample traces and their
README, ``README-rows.md`` (the README's "Measured" rows) and
``bench/results/proof-pipelines-{N}gpu-<gpu>-<date>-<HHMM>.json`` (the explain proof's pairs:
bench/common/proof_manifest.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from bench.common import method, module_command, proof_manifest, repo_env
from bench.common.gpu_clocks import ClockLog, reason_names
from bench.common.host import HostPin, ThreadCounters, cpu_model, host_probe, quiet_gc
from runtime.data import DataConfig, SyntheticLoader
from runtime.dist import init_from_env
from runtime.model import DenseOptimizerConfig, ModelConfig
from runtime.profiling import PROFILER_OPTIONS, cuda_sync_events, cupti_teardown, trace_counts
from runtime.session import RunResult, Session
from runtime.train import TrainConfig, config_dict, versions

# name -> (pipeline, options)
VARIANTS: dict[str, tuple[str, dict]] = {
    "sparse": ("sparse", {}),
    "fused": ("fused", {"lookup_stream": "data_dist", "lookup_placement": "before_optimizer"}),
    "semi": ("semi", {"start_batch": 0}),
    "base": ("base", {}),
    "fused_step_start": ("fused", {"lookup_stream": "data_dist", "lookup_placement": "step_start"}),
    "fused_new_stream": ("fused", {"lookup_stream": "new"}),
    "fused_lookup_after_dist": ("fused", {"lookup_stream": "data_dist", "lookup_placement": "after_data_dist"}),
    "fused_current_stream": ("fused", {"lookup_stream": "current"}),
    "sparse_inplace_copy": ("sparse", {"inplace_copy_batch_to_gpu": True}),
    "semi_after_forward": ("semi", {"start_batch": 0, "semi_lookup_placement": "after_forward"}),  # TorchRec's placement
    # the embedding backward in an autograd call of its own (the runtime's FusedSparseDist before 2026-11-24)
    "fused_separate": ("fused", {"lookup_stream": "data_dist", "lookup_placement": "before_optimizer", "emb_backward": "separate"}),
}
REFERENCE = "sparse"
TRACED = ("sparse", "fused", "semi", "base")
"""Variants that get a trace run (where the preset has them), unless the plan says which."""

_BIG = dict(tables=26, rows=1_000_000, dim=128, pooling=20.0, dense_arch=(1024, 1024), over_arch=(4096, 4096, 4096, 2048))

_RUN = dict(warmup=3, timed=4)
"""The shape of one run: 3 warm-up steps (pipeline fill; the allocator's growth after
``empty_cache`` is over by the second step) and 4 timed steps, then TAIL_STEPS untimed. Short
runs, many rounds: on a host whose speed moves within seconds, two runs next to each other see
nearly the same host, and more rounds narrow the interval (d124cf4:bench/NOTES-pipelines.md, "Issue 13", with the simulation on
the noise of the 2026-11-23 run)."""

TAIL_STEPS = 3
"""Steps after the timed ones in every run, not timed (``TrainConfig.tail_steps``): the pipeline
drains in its last steps (SemiSync holds three batches ahead), and until 2026-11-24 those were the
last timed steps (FusedSparseDist's last step 0.990 of its median on dense_heavy, the others
1.010; d124cf4:bench/NOTES-pipelines.md, "2026-11-24 session 2")."""

PRESETS: dict[str, dict] = {
    # 26 tables of 1M x 128 (13 GB), pooling 20, a multi-task over arch: 128 task heads (256
    # small parameters) on the 4096-wide MLP, Adam with per-parameter kernels (foreach off): a
    # dense optimizer of ~1900 short kernels that leaves most of the GPU idle, stepped on a main
    # stream of priority -2 (above the side streams). est_step_ms: the H200's step on the
    # 2026-11-23 machine, for the time budget only; rounds: the timed rounds planned (fewer if
    # the budget is short, never fewer than --min-rounds), by the noise of a round's ratio on
    # 2026-11-24 (sd: headline 0.007-0.014, multitask 0.03-0.10, b4k 0.11, p0 0.02-0.06, dense_heavy
    # 0.007): the host-bound b4k needs the most, and every other preset but the headline reached
    # its plan within the budget.
    "multitask_b32k": dict(_BIG, batch=32768, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=55,
                           rounds=48, **_RUN),
    "multitask": dict(_BIG, batch=16384, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=45,
                      rounds=48, **_RUN),
    # the same model at 4096 samples: the host issuing ~1900 optimizer launches per step takes
    # longer than the GPU's work, so the step is bound by the host and no overlap can help
    "multitask_b4k": dict(_BIG, batch=4096, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=30,
                          rounds=200, **_RUN),
    # the 16k model on torch's default stream (priority 0, below the side streams: the long
    # lookup and embedding-backward grids then hold the GPU until their last wave)
    "multitask_p0": dict(_BIG, batch=16384, task_heads=128, adam_foreach=False, main_priority=0, est_step_ms=45,
                         rounds=40, **_RUN),
    # the first run's model: one head, foreach Adam over ~44M parameters (a bandwidth-bound
    # optimizer), torch's default stream; 7 ms steps whose first few still grow the allocator
    "dense_heavy": dict(_BIG, batch=4096, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=7,
                        rounds=32, warmup=6, timed=8),
    # Held out (2026-11-27, session 2): presets never used to fit the overhead model, the replay or the
    # what-ifs, to judge them on (bench/explain_proof.py): the multitask model at 8192 samples (between
    # the host-bound b4k and the 16k), with 32 task heads at 16k (a quarter of the optimizer's
    # launches), and the dense_heavy model at 16384 samples
    "multitask_b8k": dict(_BIG, batch=8192, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=35,
                          rounds=48, **_RUN),
    "multitask_h32": dict(_BIG, batch=16384, task_heads=32, adam_foreach=False, main_priority=-2, est_step_ms=35,
                          rounds=48, **_RUN),
    "dense_b16k": dict(_BIG, batch=16384, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=20,
                       rounds=32, warmup=6, timed=8),
    # Held out (2026-11-27, session 3): presets never used to fit anything, collected before that
    # session's model changes, to judge them on: the multitask model at 12288 samples, with 64 task
    # heads at 8192 samples (half the optimizer's launches of the host-bound b8k), and the dense_heavy
    # model at 8192 samples
    "multitask_b12k": dict(_BIG, batch=12288, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=40,
                           rounds=48, **_RUN),
    "multitask_h64_b8k": dict(_BIG, batch=8192, task_heads=64, adam_foreach=False, main_priority=-2, est_step_ms=30,
                              rounds=48, **_RUN),
    "dense_b8k": dict(_BIG, batch=8192, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=12,
                      rounds=32, warmup=6, timed=8),
    # Held out (2026-11-27, session 4): presets never used to fit anything, collected before that
    # session's model changes, to judge them on: the multitask model at 6144 samples (between the
    # host-bound b4k and b8k), 16 task heads at 24576 samples (few optimizer launches, long lookups),
    # and the dense_heavy model at 12288 samples
    "multitask_b6k": dict(_BIG, batch=6144, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=32,
                          rounds=48, **_RUN),
    "multitask_h16_b24k": dict(_BIG, batch=24576, task_heads=16, adam_foreach=False, main_priority=-2, est_step_ms=45,
                               rounds=40, **_RUN),
    "dense_b12k": dict(_BIG, batch=12288, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=16,
                       rounds=32, warmup=6, timed=8),
    # Held out (2026-11-27, session 5): presets never used to fit anything, collected before that
    # session's model changes, to judge them on: the multitask model at 10240 samples (between b8k and
    # b12k), 96 task heads at 20480 samples, and the dense_heavy model at 24576 samples
    "multitask_b10k": dict(_BIG, batch=10240, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=38,
                           rounds=48, **_RUN),
    "multitask_h96_b20k": dict(_BIG, batch=20480, task_heads=96, adam_foreach=False, main_priority=-2, est_step_ms=48,
                               rounds=40, **_RUN),
    "dense_b24k": dict(_BIG, batch=24576, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=28,
                       rounds=32, warmup=6, timed=8),
    # Held out (2026-11-28, session 6): presets never used to fit anything, collected before that
    # session's model changes, to judge them on: the multitask model at 20480 samples (between the
    # 16k and the 32k), 48 task heads at 12288 samples, and the dense_heavy model at 32768 samples
    "multitask_b20k": dict(_BIG, batch=20480, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=50,
                           rounds=40, **_RUN),
    "multitask_h48_b12k": dict(_BIG, batch=12288, task_heads=48, adam_foreach=False, main_priority=-2, est_step_ms=36,
                               rounds=48, **_RUN),
    "dense_b32k": dict(_BIG, batch=32768, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=36,
                       rounds=32, warmup=6, timed=8),
    # Held out (2026-11-28, session 7): presets never used to fit anything, collected before that
    # session's model changes, to judge them on: the multitask model at 24576 samples (between the
    # 20k and the 32k), 80 task heads at 14336 samples, and the dense_heavy model at 20480 samples
    "multitask_b24k": dict(_BIG, batch=24576, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=54,
                           rounds=40, **_RUN),
    "multitask_h80_b14k": dict(_BIG, batch=14336, task_heads=80, adam_foreach=False, main_priority=-2, est_step_ms=40,
                               rounds=44, **_RUN),
    "dense_b20k": dict(_BIG, batch=20480, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=24,
                       rounds=32, warmup=6, timed=8),
    # Held out (2026-11-28, session 8): presets never used to fit anything, collected before that
    # session's model changes, to judge them on: the multitask model at 28672 samples (between the
    # 24k and the 32k), 112 task heads at 16384 samples, and the dense_heavy model at 16384 samples
    "multitask_b28k": dict(_BIG, batch=28672, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=60,
                           rounds=36, **_RUN),
    "multitask_h112_b16k": dict(_BIG, batch=16384, task_heads=112, adam_foreach=False, main_priority=-2, est_step_ms=46,
                                rounds=40, **_RUN),
    # (set 8's third preset, dense_b16k, is the one defined above, with the same values: it had been
    # run before, sample_traces/pipelines_2gpu/dense_b16k, so it was not new to the models in set 8)
    # Held out (2026-11-28, session 9): presets never used to fit anything, collected before that
    # session's model changes, to judge them on: the multitask model at 18432 samples (between the
    # 12k and the 20k), 56 task heads at 22528 samples, and the dense_heavy model at 28672 samples
    "multitask_b18k": dict(_BIG, batch=18432, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=46,
                           rounds=40, **_RUN),
    "multitask_h56_b22k": dict(_BIG, batch=22528, task_heads=56, adam_foreach=False, main_priority=-2, est_step_ms=50,
                               rounds=40, **_RUN),
    "dense_b28k": dict(_BIG, batch=28672, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=32,
                       rounds=32, warmup=6, timed=8),
    # Held out (2026-11-28, session 10): presets never used to fit anything, collected before that
    # session's model changes, to judge them on: the multitask model at 14336 samples (between the
    # 12k and the 16k), 40 task heads at 26624 samples, and the dense_heavy model at 10240 samples
    "multitask_b14k": dict(_BIG, batch=14336, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=42,
                           rounds=44, **_RUN),
    "multitask_h40_b26k": dict(_BIG, batch=26624, task_heads=40, adam_foreach=False, main_priority=-2, est_step_ms=50,
                               rounds=40, **_RUN),
    "dense_b10k": dict(_BIG, batch=10240, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=14,
                       rounds=32, warmup=6, timed=8),
    # Held out (2026-11-28, session 11): presets never used to fit anything, collected before that
    # session's model changes, to judge them on: the multitask model at 22528 samples (between the
    # 20k and the 24k), 24 task heads at 30720 samples, and the dense_heavy model at 6144 samples
    "multitask_b22k": dict(_BIG, batch=22528, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=52,
                           rounds=40, **_RUN),
    "multitask_h24_b30k": dict(_BIG, batch=30720, task_heads=24, adam_foreach=False, main_priority=-2, est_step_ms=55,
                               rounds=36, **_RUN),
    "dense_b6k": dict(_BIG, batch=6144, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=10,
                      rounds=32, warmup=6, timed=8),
    # Held out (2026-11-28, session 12): presets never used to fit anything, collected before that
    # session's model changes, to judge them on: the multitask model at 26624 samples (between the
    # 24k and the 28k), 72 task heads at 18432 samples, and the dense_heavy model at 14336 samples
    "multitask_b26k": dict(_BIG, batch=26624, task_heads=128, adam_foreach=False, main_priority=-2, est_step_ms=57,
                           rounds=38, **_RUN),
    "multitask_h72_b18k": dict(_BIG, batch=18432, task_heads=72, adam_foreach=False, main_priority=-2, est_step_ms=44,
                               rounds=40, **_RUN),
    "dense_b14k": dict(_BIG, batch=14336, task_heads=1, adam_foreach=True, main_priority=0, est_step_ms=18,
                       rounds=32, warmup=6, timed=8),
    # the CI-sized smoke preset (seconds on any GPU; the CPU smoke test)
    "tiny": dict(tables=8, rows=10_000, dim=32, batch=256, pooling=4.0, dense_arch=(64,), over_arch=(256, 128),
                 task_heads=4, adam_foreach=False, main_priority=-2, est_step_ms=5, rounds=10, **_RUN),
}
SPEC_ONLY = ("est_step_ms", "rounds", "warmup", "timed")
"""PRESETS keys about the measurement, not the model (left out of the results' ``spec``)."""

MAIN = ("sparse", "fused", "semi")
# (preset, variants, traced variants); the first preset is the headline (every variant; its
# traces in sample_traces/pipelines_{N}gpu/<variant>/, the others' in .../<preset>/<variant>/).
# Traced besides the headline: what the 16k question and the explain proof's host-bound pair
# need (the sample traces stay a few MB).
# The other variants of VARIANTS (the questions of 2026-11-21/23/24, answered in
# bench/NOTES-pipelines.md: fused_separate, the embedding backward in a second autograd call as
# FusedSparseDist did before 2026-11-24, among them) run with --plan; each one in the plan takes
# rounds from the others and adds a figure two calls must agree on.
PLAN = (
    ("multitask_b32k", ("sparse", "fused", "semi", "base"), TRACED),
    ("multitask", MAIN, ("sparse", "fused")),
    ("multitask_b4k", MAIN, ("sparse", "fused")),
    ("multitask_p0", MAIN, ()),
    ("dense_heavy", MAIN, ()),
)
OLD_METHOD_PRESETS = ("multitask_b32k", "multitask")
"""Presets whose ``old_method`` diagnostic runs (``--diagnostics``; the issue's two disagreeing
presets)."""

# the explain proof (issue 9 section 4): (before, after, fix, presets)
PROOF_PAIRS = (("sparse", "fused", "fused_sparse_dist", ("multitask_b32k", "multitask_b4k", "multitask", "dense_heavy", "tiny",
                                                      "multitask_b8k", "multitask_h32", "multitask_p0", "dense_b16k",
                                                      "multitask_b12k", "multitask_h64_b8k", "dense_b8k",
                                                      "multitask_b6k", "multitask_h16_b24k", "dense_b12k",
                                                      "multitask_b10k", "multitask_h96_b20k", "dense_b24k",
                                                      "multitask_b20k", "multitask_h48_b12k", "dense_b32k",
                                                      "multitask_b24k", "multitask_h80_b14k", "dense_b20k",
                                                      "multitask_b28k", "multitask_h112_b16k", "dense_b16k",
                                                      "multitask_b18k", "multitask_h56_b22k", "dense_b28k",
                                                      "multitask_b14k", "multitask_h40_b26k", "dense_b10k",
                                                      "multitask_b22k", "multitask_h24_b30k", "dense_b6k",
                                                      "multitask_b26k", "multitask_h72_b18k", "dense_b14k")),)

TARGETS = {"fused": (0.95, 0.97), "semi": (0.92, 0.95)}
"""Headline preset: median ratio <= first, interval's upper end <= second."""
NEVER_COSTS = ("fused", 1.02)
"""Every preset: FusedSparseDist's interval's upper end <= 1.02 (numerically identical: it must never cost time)."""


# ------------------------------------------------------------------------------------------
# configs
# ------------------------------------------------------------------------------------------
def run_config(preset: dict, variant: str, *, device: str, warmup: int, timed: int, profile: int, out: Path, seed: int) -> TrainConfig:
    rows = (preset["rows"],) * preset["tables"]
    model = ModelConfig(
        num_embeddings=rows, embedding_dim=preset["dim"], num_dense=13, dense_arch=preset["dense_arch"],
        over_arch=preset["over_arch"], task_heads=preset["task_heads"], embedding_optimizer="rowwise_adagrad",
        embedding_backend="auto", seed=seed,
    )
    data = DataConfig(
        num_embeddings=rows, batch_size=preset["batch"], pooling_factor=preset["pooling"], distribution="zipf",
        num_dense=13, distinct_batches=4, seed=seed,
    )
    pipeline, opts = VARIANTS[variant]
    return TrainConfig(
        pipeline=pipeline, device=device, warmup_steps=warmup, timed_steps=timed, profile_steps=profile,
        tail_steps=TAIL_STEPS, out=str(out), model=model, data=data, allow_tf32=True, main_stream_priority=preset["main_priority"],
        dense_optimizer=DenseOptimizerConfig(kind="adam", lr=1e-3, foreach=preset["adam_foreach"]), **opts,
    )


# ------------------------------------------------------------------------------------------
# one rank's view of a run, and the ranks combined
# ------------------------------------------------------------------------------------------
def _run_summary(run: RunResult) -> dict:
    steps = run.step_ms
    out = {
        "step_ms_median": method.median(steps),
        "step_ms_p90": method.percentile(steps, 0.9),
        "step_ms": [round(x, 4) for x in steps],
        "warmup_step_ms": [round(x, 4) for x in run.step_ms_all[: run.timed[0]]],
        "host_step_ms_median": method.median(run.host_step_ms),
        "gpu_waited_share": run.gpu_waited_share,
        "first_step_ms": run.step_ms_all[0] if run.step_ms_all else None,
        "first_step_host_ms": run.host_step_ms_all[0] if run.host_step_ms_all else None,
        "peak_reserved_bytes": run.peak_reserved_bytes,
        "peak_allocated_bytes": run.peak_allocated_bytes,
        "reserved_at_start_bytes": run.reserved_at_start_bytes,
        "allocator_timed": run.allocator_timed,
        "allocator_run": run.allocator_run,
        "final_loss": run.final_loss,
        "reset_s": run.reset_s,
        "wall_s": run.wall_s,
        "traced_step_ms": [round(x, 4) for x in run.traced_step_ms],
        "embedding_backend": run.embedding_backend,
    }
    if run.profiled is not None:  # a trace run: every step's host and GPU time, untraced and traced
        out["host_step_ms"] = [round(x, 4) for x in run.host_step_ms]
        out["traced_host_step_ms"] = [round(x, 4) for x in run.traced_host_step_ms]
        out["profiler_warmup_step_ms"] = [round(run.step_ms_all[run.profiled[0] - 1], 4),
                                          round(run.host_step_ms_all[run.profiled[0] - 1], 4)]
    return out


def _combine(ranks: list[dict]) -> dict:
    """The ranks' summaries as one: times and memory the worst rank's (max), the rest rank 0's."""
    out = dict(ranks[0])
    for k in ("step_ms_median", "step_ms_p90", "peak_reserved_bytes", "peak_allocated_bytes", "first_step_ms", "gpu_waited_share"):
        vals = [r[k] for r in ranks if r.get(k) is not None]
        out[k] = max(vals) if vals else None
    if len(ranks) > 1:
        # a trace run (host_step_ms set): each rank's steps, untraced and traced, host and GPU
        keep = ("step_ms_median", "peak_reserved_bytes", "step_ms", "host_step_ms", "traced_step_ms", "traced_host_step_ms",
                "profiler_warmup_step_ms")
        out["ranks"] = [{k: r[k] for k in (keep if "host_step_ms" in r else keep[:2]) if k in r} for r in ranks]
    return out


class Bench:
    """The state of one benchmark process (every rank runs the same calls in the same order)."""

    def __init__(self, args, info) -> None:  # noqa: ANN001
        self.args, self.info = args, info
        self.rank0 = info.rank == 0
        self.gpu = args.device == "cuda"
        self.t0 = time.perf_counter()
        self.out = Path(args.out)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.date = args.date or now.strftime("%Y%m%d")
        # two calls on one day must not write the same file names: the hour and minute of the
        # start, unless the caller names the run (--label) or the date (--date, the tests)
        label = args.label if args.label is not None else ("" if args.date else now.strftime("%H%M"))
        self.device_name = torch.cuda.get_device_name() if self.gpu else (platform.processor() or "cpu")
        self.tag = f"{info.world_size}gpu-{proof_manifest.device_slug(self.device_name)}-{self.date}" + (f"-{label}" if label else "")
        # the host: the main thread alone on one CPU (GPU runs; bench/common/host.py)
        self.pin = HostPin(enabled=args.pin and self.gpu, why_not="--no-pin" if self.gpu else "a CPU smoke run",
                           rank=int(os.environ.get("LOCAL_RANK", 0)), ranks=int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        self.last_clock_sample = -1e9
        self.samples_dir = f"sample_traces/pipelines_{info.world_size}gpu"
        self.profiler_dir = f"sample_traces/profiler_{info.world_size}gpu"
        self.profile_options = parse_profile_options(args.profile_options)
        self.commit = self.out / "commit"
        self.clocks = None
        self.old_clock_rows: list[str] = []  # clocks.csv rows of the passes before (a process each)
        self.doc: dict = {
            "title": f"Pipelines on {info.world_size} x {self.device_name}",
            "device": self.device_name,
            "world_size": info.world_size,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python -m bench.pipelines", *_without_pass_index(sys.argv[1:])]),
            "versions": versions(),
            "method": {
                "warmup_rounds": "1 per preset and pass", "passes": args.passes, "min_rounds": args.min_rounds,
                "max_rounds": args.rounds,
                "warmup_steps": args.warmup_steps, "timed_steps": args.steps,
                "run_shape": "per preset (warm-up steps, timed steps, rounds planned) unless the command sets them",
                "order": "the plan run --passes times over (each preset's rounds spread over the call); in each pass "
                         "a warm-up round in plan order, then timed rounds in mirrored pairs of rotated orders",
                "figure": "per round: median of the timed steps (GPU time between CUDA events on the main stream); "
                          "ratios within the round; median over rounds with a 95 % percentile bootstrap interval, "
                          "two-stage over the passes (each a process of its own, on its own main CPU) then their rounds "
                          f"({method.RESAMPLES} resamples, bench/common/method.py)",
                "host": "main thread pinned alone to one CPU, the cyclic GC off during each run, a host probe and the "
                        "main thread's counters around each run (bench/common/host.py)",
                "reference": REFERENCE,
            },
            "process": {},
            "processes": [],
            "presets": [],
            "total_s": None,
            "tag": self.tag,
            "started_unix": time.time(),
        }
        if args.pass_index:
            self.resume()

    def resume(self) -> None:
        """Pass K > 0 in a process of its own: the document of the passes before (their rounds,
        the tag and the start) from ``<out>/results.json``; this process's clock counts from the
        first pass's start, so rounds' times and the budget run on across the processes."""
        doc = json.loads((self.out / "results.json").read_text())
        if doc.get("tag") is None or doc["method"].get("passes") != self.args.passes:
            raise SystemExit(f"bench.pipelines: error: {self.out / 'results.json'} is not from pass 1 of this benchmark")
        self.doc, self.tag = doc, doc["tag"]
        self.t0 = time.perf_counter() - (time.time() - doc["started_unix"])
        csv = self.out / "clocks.csv"
        if csv.exists():
            self.old_clock_rows = csv.read_text().splitlines()[1:]

    # ---- helpers -------------------------------------------------------------------------
    def now(self) -> float:
        return time.perf_counter() - self.t0

    def say(self, msg: str) -> None:
        if self.rank0:
            print(f"[bench {self.now():6.1f}s] {msg}", file=sys.stderr, flush=True)

    def decide(self, value):  # noqa: ANN001, ANN201
        """Rank 0's value, on every rank."""
        box = [value]
        if self.info.world_size > 1:
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, mine: dict) -> list[dict]:
        if self.info.world_size == 1:
            return [mine]
        got: list = [None] * self.info.world_size
        dist.all_gather_object(got, mine)
        return got

    def clocks_in(self, t0: float, t1: float) -> dict | None:
        """Clock summary over [t0, t1) (bench seconds)."""
        if self.clocks is None:
            return None
        return self.clocks.window(t0 + self.t0, t1 + self.t0)

    def publish(self, *, every_s: float = 0.0) -> None:
        """Writes results.json/.md (rank 0); with ``every_s``, only if the last write is older."""
        if not self.rank0 or self.now() - getattr(self, "_published", -1e9) < every_s:
            return
        self._published = self.now()
        self.doc["total_s"] = round(self.now(), 1)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "results.json").write_text(json.dumps(self.doc, indent=1, default=str))
        (self.out / "results.md").write_text("\n".join(markdown(self.doc)) + "\n")
        if self.clocks is not None:
            with open(self.out / "clocks.csv", "w") as f:
                f.write("t_s,sm_mhz,mem_mhz,temp_c,power_w,reasons\n")
                f.writelines(row + "\n" for row in self.old_clock_rows)
                for t, s in list(self.clocks.samples):
                    f.write(f"{t - self.t0:.3f},{s.get('sm_mhz')},{s.get('mem_mhz')},{s.get('temp_c')},{s.get('power_w')},"
                            f"{'' if s.get('reasons') is None else hex(s['reasons'])}\n")

    # ---- the process: CUDA start, clocks, the extension ------------------------------------
    def start_process(self) -> None:
        # one process per pass: doc["processes"] has each one's start, doc["process"] the first's
        proc = {"pass": self.args.pass_index or 0, "pid": os.getpid()}
        self.doc["processes"].append(proc)
        if not self.doc["process"]:
            self.doc["process"] = proc
        proc["env"] = {k: os.environ.get(k) for k in ("CUDA_MODULE_LOADING", "PYTORCH_CUDA_ALLOC_CONF", "TBE_KERNELS_BUILD_DIR",
                                                    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")}
        proc["cpu_count"] = os.cpu_count()
        proc["cpu_model"] = cpu_model()
        proc["pin"] = self.pin.status
        proc["cuda_sync_events"] = cuda_sync_events()
        # CUPTI torn down after each trace (runtime.profiling.cupti_teardown): left attached, the
        # runs after a process's first trace ran 5-100 % slower on the host-bound presets
        proc["cupti_teardown"] = cupti_teardown()
        if not self.gpu:
            return
        t = time.perf_counter()
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
        proc["cuda_first_alloc_s"] = round(time.perf_counter() - t, 3)
        if self.rank0:
            uuid = str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", "") or "") or None
            self.clocks = ClockLog(uuid=uuid, interval_ms=self.args.clock_log_ms)
            proc["clock_log"] = self.clocks.status + ("" if self.args.clock_log_ms > 0 else
                                                      f" (one query every >= {self.args.clock_every_s:g} s, between rounds)")
            q = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,persistence_mode,power.limit,clocks.max.sm,clocks.max.mem,"
                 "clocks.applications.graphics", "--format=csv"], capture_output=True, text=True, timeout=30,
            ) if shutil.which("nvidia-smi") else None
            proc["nvidia_smi"] = q.stdout.strip() if q is not None and q.returncode == 0 else None
        # the TBE extension: built here on a fresh machine (minutes), else loaded from its cache
        from runtime.kernels import cuda as tbe_cuda

        t = time.perf_counter()
        try:
            tbe_cuda.load()
            proc["tbe_extension"] = "loaded"
        except Exception as e:  # noqa: BLE001 - the runs then use the reference (said in the table)
            proc["tbe_extension"] = f"unavailable: {e}"[:300]
        proc["tbe_extension_load_s"] = round(time.perf_counter() - t, 2)
        proc["host_probe_us"] = round(host_probe(), 3)
        self.say(f"CUDA start {proc['cuda_first_alloc_s']} s, TBE extension {proc['tbe_extension']} in "
                 f"{proc['tbe_extension_load_s']} s, clock log {proc.get('clock_log')}, pin {self.pin.status}, "
                 f"host probe {proc['host_probe_us']} us/op")

    def keep_window_trace(self, folder: Path) -> str:
        """Rank 0, after a window's run (every rank's trace written: the run ends with a gather):
        its traces stay unless one is larger than ``--window-trace-max-mb`` or the window traces
        of this call (every pass) pass ``--window-traces-max-mb`` in all; a trace dropped is
        said, its counts (``trace_counts``, taken before) and step times stay in the results."""
        files = sorted(folder.glob("trace_rank*.json.gz"))
        size = sum(f.stat().st_size for f in files)
        total = sum(f.stat().st_size for f in (self.commit / self.profiler_dir).rglob("trace_rank*.json.gz"))
        why = None
        if self.args.window_trace_max_mb and max((f.stat().st_size for f in files), default=0) > self.args.window_trace_max_mb * 2**20:
            why = f"dropped: larger than {self.args.window_trace_max_mb:g} MiB ({size / 2**20:.1f} MiB)"
        elif self.args.window_traces_max_mb and total > self.args.window_traces_max_mb * 2**20:
            why = f"dropped: the window traces passed {self.args.window_traces_max_mb:g} MiB in all ({size / 2**20:.1f} MiB)"
        if why is None:
            return "kept"
        for f in files:
            f.unlink()
        return why

    # ---- probes (per round) ----------------------------------------------------------------
    def probes(self, session: Session, loader: SyntheticLoader) -> dict:
        """GEMM (bound by SM clocks) and lookup (bound by memory, on the preset's tables) timed
        with CUDA events, median of a few calls; rank-local, 1 rank only for the lookup."""
        if not self.gpu:
            return {}
        out = {}
        with torch.no_grad():
            torch.cuda.synchronize()
            t = time.perf_counter()
            a = torch.randn(8192, 8192, device="cuda")
            out["gemm_ms"] = _median_ms(lambda: a @ a, 5)
            out["gemm_first_call_host_s"] = round(time.perf_counter() - t, 3)
            del a
            if self.info.world_size == 1 and session.embedding is not None:
                kjt = next(iter(loader)).sparse.to(session.device)
                out["lookup_ms"] = _median_ms(lambda: session.model.sparse_arch.local(kjt), 3)
        return out

    # ---- one run of one variant ------------------------------------------------------------
    def run(self, session: Session, loader: SyntheticLoader, cfg: TrainConfig) -> dict:
        """One run of ``cfg`` with the host kept steady (threads pinned, GC off) and measured
        (the host probe right before, the main thread's counters over the run)."""
        batches = loader.first(cfg.total_steps)
        self.pin.apply(children=[pid] if (pid := getattr(self.clocks, "pid", None)) else [])
        probe = host_probe()
        with quiet_gc():
            c0 = ThreadCounters.now(self.pin.main_cpu)
            t0 = self.now()
            run = session.run(cfg, batches, progress=False)
            t1 = self.now()
            counters = ThreadCounters.now(self.pin.main_cpu).since(c0)
        mine = _run_summary(run)
        mine.update(host_probe_us=round(probe, 3), host=counters)
        seg = _combine(self.gather(mine))
        seg["t"] = [round(t0, 3), round(t1, 3)]
        seg["clocks"] = self.clocks_in(t0, t1)
        if run.trace:
            seg["trace"] = run.trace
        return seg

    # ---- a preset ----------------------------------------------------------------------------
    def preset(self, name: str, variants: list[str], *, traced: tuple[str, ...], headline: bool, share_s: float,
               pass_index: int = 0, passes: int = 1) -> None:
        """One pass over a preset: the model built, a warm-up round, this pass's share of the
        timed rounds; in the last pass also the traces (and the diagnostics). The plan runs
        ``passes`` times over (``--passes``) so that each preset's rounds are spread over the
        whole call, not one window of it: the host's speed moves over minutes (2026-11-24: one
        call's headline window had the host at 5.8 us/op for most rounds, the next call's at 3.3)
        and the multitask presets' ratios move with it."""
        args, spec = self.args, PRESETS[name]
        warmup, timed, planned = run_shape(args, spec)
        folder = self.commit / self.samples_dir / ("" if headline else name)
        last = pass_index == passes - 1
        pdoc = next((p for p in self.doc["presets"] if p["preset"] == name), None)
        # this pass's rounds: the next ones of the preset's sequence of mirrored orders, an even
        # share of those still planned, at least its share of --min-rounds
        done = 0 if pdoc is None else sum(not rd["warmup"] for rd in pdoc["rounds"])
        most = min(planned, done + _even_up((planned - done) / (passes - pass_index)))
        least = min(most, done + _even_up(args.min_rounds / passes))
        if most == done and not last:
            return  # every planned round has run: nothing for this pass
        self.pin.select(pass_index)  # each pass its own main CPU (a per-CPU offset is then sampled)
        if pdoc is None:
            pdoc = {
                "preset": name, "headline": headline, "spec": {k: v for k, v in spec.items() if k not in SPEC_ONLY},
                "run_shape": {"warmup_steps": warmup, "timed_steps": timed, "rounds_planned": planned},
                "variants": variants, "rounds": [], "summary": {}, "targets": {}, "traces": {}, "diagnostics": {},
                "setup": {}, "budget_s": 0.0, "passes": passes, "main_cpus": [],
            }
            self.doc["presets"].append(pdoc)
        pdoc["budget_s"] = round(pdoc["budget_s"] + share_s, 1)
        pdoc.setdefault("main_cpus", []).append(self.pin.main_cpu)
        cfgs = {v: run_config(spec, v, device=args.device, warmup=warmup, timed=timed, profile=0,
                           out=folder / v, seed=args.seed) for v in variants}
        # the trace runs ("windows"): each traced variant under each profiler option set
        # (--profile-options; "default" is the runtime's, written in the sample traces' layout,
        # the others under sample_traces/profiler_{N}gpu/<preset>/<variant>/<option>/), variants
        # in alternating order from one option to the next
        windows: list[tuple[str, str, TrainConfig]] = []
        if args.profile_steps and last:
            tv = [v for v in variants if v in traced]
            for i, opt in enumerate(self.profile_options):
                for v in (tv if i % 2 == 0 else tv[::-1]):
                    if opt != "default" and args.window_variants and v not in args.window_variants.split(","):
                        continue
                    out = folder / v if opt == "default" else self.commit / self.profiler_dir / name / v / opt
                    windows.append((v, opt, dataclasses.replace(cfgs[v], timed_steps=max(3, timed), profile_steps=args.profile_steps,
                                                                out=str(out), profiler=PROFILER_OPTIONS[opt])))
        longest = max([c.total_steps for c in cfgs.values()] + [c.total_steps for _, _, c in windows] + [50])
        first = cfgs[variants[0]]
        pdoc.update(model=dataclasses.asdict(first.model), data=dataclasses.asdict(first.data),
                    dense_optimizer=dataclasses.asdict(first.dense_optimizer), main_stream_priority=first.main_stream_priority)
        t_preset = self.now()
        t = time.perf_counter()
        loader = SyntheticLoader(dataclasses.replace(first.data, num_batches=longest), rank=self.info.rank)
        pdoc["setup"].setdefault("loader_s", round(time.perf_counter() - t, 2))
        t = time.perf_counter()
        session = Session(first)
        pdoc["setup"].setdefault("model_build_s", round(session.build_s, 2))
        pdoc["setup"]["model_bytes"] = sum(p.numel() * p.element_size() for p in session.model.parameters()) + sum(
            b.numel() * b.element_size() for b in session.model.buffers())
        self.say(f"{name} (pass {pass_index + 1} of {passes}): loader {time.perf_counter() - t:.2f} s with the model, "
                 f"runs of {warmup} + {timed} (+ {TAIL_STEPS} tail) steps")

        def one_round(r: int, order: list[str]) -> None:
            # between rounds, every few seconds: a clock sample and the GEMM / lookup probes
            due = r == 0 or self.now() - self.last_clock_sample >= args.clock_every_s
            if due:
                self.last_clock_sample = self.now()
                if self.clocks is not None:
                    self.clocks.sample()
            rd = {"round": r, "warmup": r == 0, "pass": pass_index, "order": order, "t": [round(self.now(), 3)],
                  "probes": self.probes(session, loader) if due else {}, "runs": {}}
            pdoc["rounds"].append(rd)
            for v in order:
                rd["runs"][v] = self.run(session, loader, cfgs[v])
            rd["t"].append(round(self.now(), 3))
            rd["clocks"] = self.clocks_in(rd["t"][0] - 0.5, rd["t"][1])  # the sample taken just before it
            self.publish(every_s=15.0)  # the figures are made at the preset's end
            ref = rd["runs"].get(REFERENCE, {}).get("step_ms_median")
            self.say(f"{name} round {r}{' (warm-up)' if r == 0 else ''}: " + ", ".join(
                f"{v} {rd['runs'][v]['step_ms_median']:.3f}" + (f" ({rd['runs'][v]['step_ms_median'] / ref:.3f})" if ref and v != REFERENCE else "")
                for v in variants) + f" ms  ({rd['t'][1] - rd['t'][0]:.1f} s)")

        if most > done:
            one_round(0, list(variants))
        # a trace run: its steps, the profiler's start and the trace's export (~1.5-2.6 s on the
        # multitask presets, H200 2026-11-24); with stacks (Python's tracer) or TorchRec's set, more
        traces_s = sum((1.0 + 0.03 * spec["est_step_ms"]) * (3.0 if c.profiler.with_stack else 1.5 if c.profiler.record_shapes else 1.0)
                       for _, _, c in windows) if self.gpu else 2.0 * len(windows)
        diag_s = 0.0
        if self.gpu and args.diagnostics and last:
            diag_s += self.old_method_s(name, variants) + (15.0 if headline else 0.0)
        left = share_s - (self.now() - t_preset) - traces_s - diag_s
        pdoc["timed_rounds_planned"] = planned
        t_rounds = self.now()
        for r, order in enumerate(method.round_orders(variants, planned)[done:], start=done + 1):
            if not self.decide(method.next_round_runs(done=r - 1 - done, elapsed_s=self.now() - t_rounds, left_s=left,
                                                      least=least - done, most=most - done)):
                break
            one_round(r, order)

        self.summarize(pdoc)  # the figures each sample trace's metrics.json carries
        for v, opt, cfg in windows:
            seg = self.run(session, loader, cfg)
            if self.rank0:
                seg["trace_counts"] = trace_counts(seg["trace"])  # did cuda_sync and [memory] make it in?
                write_run_metrics(Path(cfg.out), seg, pdoc, v, cfg, self)
                kept = self.keep_window_trace(Path(cfg.out)) if opt != "default" else "kept"
            kept = self.decide(kept if self.rank0 else None)
            rel = str(Path(cfg.out).relative_to(self.commit))
            if opt == "default":
                pdoc["traces"][v] = {"dir": rel, **{k: seg.get(k) for k in (
                    "step_ms_median", "traced_step_ms", "peak_reserved_bytes", "gpu_waited_share", "trace_counts")}}
            pdoc.setdefault("windows", []).append({
                "variant": v, "option": opt, "profiler": dataclasses.asdict(cfg.profiler), "dir": rel, "trace": kept,
                **{k: seg.get(k) for k in ("t", "step_ms", "host_step_ms", "traced_step_ms", "traced_host_step_ms",
                                           "profiler_warmup_step_ms", "step_ms_median", "host_probe_us", "trace_counts", "ranks")}})
            self.say(f"{name} trace {v} [{opt}]: untraced {seg['step_ms_median']:.3f} ms, traced {seg['traced_step_ms']} "
                     f"(host {seg.get('traced_host_step_ms')}), events {(seg.get('trace_counts') or {}).get('events')}, trace {kept}")
            self.publish(every_s=15.0)
        self.publish()

        diagnose = self.gpu and args.diagnostics and last
        if diagnose:
            self.old_method(name, variants, pdoc, session, loader, cfgs, share_s - (self.now() - t_preset))
        gc.unfreeze()  # every run froze what survived it (bench/common/host.py's quiet_gc): the model can go now
        del session
        gc.collect()
        if self.gpu:
            torch.cuda.empty_cache()
        if diagnose and headline:
            self.fresh_tables(variants, pdoc, loader, cfgs, share_s - (self.now() - t_preset))
        self.summarize(pdoc)
        self.publish()

    def old_method(self, name, variants, pdoc, session, loader, cfgs, left_s) -> None:  # noqa: ANN001
        """The method before this one, replayed: the GPU idle ``--idle-s`` seconds (as it was
        while the next variant's model and data were built), then SparseDist, FusedSparseDist
        and SemiSync back to back, 10 warm-up + 40 timed steps each, P90 ratios."""
        main = [v for v in MAIN if v in variants]
        need = self.old_method_s(name, variants)
        if not need:
            return
        if not self.decide(left_s > need):
            pdoc["diagnostics"]["old_method"] = "skipped: time budget"
            return
        t_idle = self.now()
        torch.cuda.synchronize()
        time.sleep(self.args.idle_s)
        old = {"idle_s": self.args.idle_s, "idle_clocks": self.clocks_in(t_idle, self.now()), "runs": {}}
        for v in main:
            old["runs"][v] = self.run(session, loader, dataclasses.replace(cfgs[v], warmup_steps=10, timed_steps=40))
        ref = old["runs"][REFERENCE]["step_ms_p90"]
        old["p90_ratio"] = {v: old["runs"][v]["step_ms_p90"] / ref for v in main}
        pdoc["diagnostics"]["old_method"] = old
        self.say(f"{name} old method after {self.args.idle_s} s idle: P90 ratios {old['p90_ratio']}")

    def old_method_s(self, name: str, variants: list[str]) -> float:
        """Seconds the old_method diagnostic takes on this preset (0: it does not run here)."""
        main = [v for v in MAIN if v in variants]
        if name not in OLD_METHOD_PRESETS or REFERENCE not in main:
            return 0.0
        return self.args.idle_s + len(main) * 50 * PRESETS[name]["est_step_ms"] / 1e3 + 5

    def fresh_tables(self, variants, pdoc, loader, cfgs, left_s) -> None:  # noqa: ANN001
        """The model built again (a new 13 GB allocation, the old one freed), SparseDist and
        FusedSparseDist once more: does the step time depend on where the tables landed?"""
        pair = [v for v in (REFERENCE, "fused") if v in variants]
        if len(pair) < 2:
            return
        if not self.decide(left_s > 10):
            pdoc["diagnostics"]["fresh_tables"] = "skipped: time budget"
            return
        t = time.perf_counter()
        fresh = Session(cfgs[REFERENCE])
        ft = {"model_build_s": round(time.perf_counter() - t, 2), "probes": self.probes(fresh, loader), "runs": {}}
        for v in pair:
            ft["runs"][v] = self.run(fresh, loader, cfgs[v])
        ft["ratio"] = ft["runs"]["fused"]["step_ms_median"] / ft["runs"][REFERENCE]["step_ms_median"]
        pdoc["diagnostics"]["fresh_tables"] = ft
        self.say(f"fresh tables: sparse {ft['runs'][REFERENCE]['step_ms_median']:.3f} ms, ratio {ft['ratio']:.3f}")
        del fresh
        gc.collect()
        torch.cuda.empty_cache()

    # ---- figures -----------------------------------------------------------------------------
    def summarize(self, pdoc: dict) -> None:
        timed = [rd for rd in pdoc["rounds"] if not rd["warmup"]]
        if not timed:
            return
        figures = {
            "step": "step_ms_median",
            "reserved": "peak_reserved_bytes",
            "allocated": "peak_allocated_bytes",
        }
        summary: dict = {}
        for fig, key in figures.items():
            per_round = [{v: run[key] for v, run in rd["runs"].items() if run.get(key) is not None} for rd in timed]
            if not any(per_round):
                continue
            # two-stage intervals over the passes (each with its own main CPU and model): an offset
            # a pass shares widens the interval
            for v, est in method.summarize(per_round, REFERENCE, clusters=[rd.get("pass", 0) for rd in timed]).items():
                s = summary.setdefault(v, {})
                s[f"{fig}" if fig == "step" else f"{fig}_bytes"] = est["value"].to_dict()
                if "ratio" in est:
                    s["ratio" if fig == "step" else f"{fig}_ratio"] = est["ratio"].to_dict()
        warm = next((rd for rd in pdoc["rounds"] if rd["warmup"]), None)
        for v, s in summary.items():
            runs = [rd["runs"][v] for rd in timed if v in rd["runs"]]
            s["gpu_waited_share"] = method.median([r["gpu_waited_share"] for r in runs if r["gpu_waited_share"] is not None])
            s["host_step_ms"] = method.median([r["host_step_ms_median"] for r in runs])
            s["first_step_ms"] = method.median([r["first_step_ms"] for r in runs if r["first_step_ms"] is not None])
            allocs = [r["allocator_timed"].get("segment.all.allocated") for r in runs]
            s["device_allocs_in_timed_steps"] = None if None in allocs else sum(allocs)  # cudaMalloc calls
            losses = {r["final_loss"] for r in runs}
            s["final_loss"] = runs[-1]["final_loss"] if runs else None
            s["final_loss_same_every_round"] = len(losses) == 1
            if warm is not None and v in warm["runs"] and s.get("step"):
                s["warmup_round_step_ms"] = warm["runs"][v]["step_ms_median"]
                s["warmup_round_over_median"] = warm["runs"][v]["step_ms_median"] / s["step"]["median"]
        ref_loss = summary.get(REFERENCE, {}).get("final_loss")
        for v, s in summary.items():
            if VARIANTS[v][0] in ("sparse", "fused", "base") and ref_loss is not None:
                s["final_loss_equals_sparse"] = s["final_loss"] == ref_loss
        pdoc["summary"] = summary
        pdoc["timed_rounds"] = len(timed)
        pdoc["targets"] = targets(pdoc)
        pdoc["host"] = host_summary(timed)


def host_summary(timed: list[dict]) -> dict:
    """What the host did over a preset's timed runs: the host probe (us/op: median, P10, P90),
    how much of the runs' step-time spread the probe accounts for (Pearson r between the logs of
    each run's step over its variant's median and of its probe over the median probe), the main
    thread's involuntary context switches per run (median, max) and CPU(s), and the steal and
    interrupt share of that CPU's time (ticks summed over the runs)."""
    runs = [(v, run) for rd in timed for v, run in rd["runs"].items()]
    probes = [run["host_probe_us"] for _, run in runs if run.get("host_probe_us")]
    out: dict = {"runs": len(runs)}
    if probes:
        out["probe_us"] = {"median": method.median(probes), "p10": method.percentile(probes, 0.1), "p90": method.percentile(probes, 0.9)}
        med_v = {v: method.median([r["step_ms_median"] for vv, r in runs if vv == v]) for v, _ in runs}
        pairs = [(math.log(r["step_ms_median"] / med_v[v]), math.log(r["host_probe_us"] / out["probe_us"]["median"]))
                 for v, r in runs if r.get("host_probe_us") and r.get("step_ms_median") and med_v[v]]
        if len(pairs) >= 3:
            xs, ys = zip(*pairs)
            out["step_vs_probe_r"] = None if min(np.std(xs), np.std(ys)) == 0 else round(float(np.corrcoef(xs, ys)[0, 1]), 3)
    hosts = [run["host"] for _, run in runs if run.get("host")]
    if hosts:
        inv = [h["involuntary_switches"] for h in hosts]
        out["involuntary_switches"] = {"median": method.median(inv), "max": max(inv)}
        out["thread_cpu_share"] = _r(method.median([h["thread_cpu_share"] for h in hosts]))
        out["cpus"] = sorted({h["cpu"] for h in hosts if h.get("cpu") is not None})
        ticks = [h for h in hosts if "all_ticks" in h]
        total = sum(h["all_ticks"] for h in ticks)
        if total:
            out["steal_share"] = round(sum(h["steal_ticks"] for h in ticks) / total, 4)
            out["irq_share"] = round(sum(h["irq_ticks"] for h in ticks) / total, 4)
    return out


def _even_up(x: float) -> int:
    """The smallest even integer >= x (whole mirrored pairs of rounds)."""
    n = math.ceil(x)
    return n + n % 2


def run_shape(args, spec: dict) -> tuple[int, int, int]:  # noqa: ANN001
    """(warm-up steps, timed steps, timed rounds planned) of a preset's runs: the preset's, unless
    the command sets them (--warmup-steps, --steps, --rounds)."""
    pick = lambda given, own: own if given is None else given  # noqa: E731
    return pick(args.warmup_steps, spec["warmup"]), pick(args.steps, spec["timed"]), max(pick(args.rounds, spec["rounds"]), args.min_rounds)


def _median_ms(fn, reps: int) -> float:  # noqa: ANN001
    fn()  # first call (handles, lazy loading) outside the figure
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return round(method.median(times), 4)


def targets(pdoc: dict) -> dict:
    """The issue's targets that apply to this preset, each True/False."""
    s, out = pdoc["summary"], {}
    if pdoc["headline"]:
        for v, (med, hi) in TARGETS.items():
            r = s.get(v, {}).get("ratio")
            if r:
                out[f"{v}: median <= {med} and upper end <= {hi}"] = r["median"] <= med and r["hi"] <= hi
    v, hi = NEVER_COSTS
    r = s.get(v, {}).get("ratio")
    if r:
        out[f"{v}: upper end <= {hi}"] = r["hi"] <= hi
    return out


# ------------------------------------------------------------------------------------------
# what the lead commits
# ------------------------------------------------------------------------------------------
def write_run_metrics(folder: Path, seg: dict, pdoc: dict, variant: str, cfg: TrainConfig, bench: Bench) -> None:
    """metrics.json beside a sample trace: the variant's measured figures (``step_ms_p50``: the
    median over the timed rounds of each round's median step; ``measured_summary``), the trace
    run's own figures and its config (the keys runtime.train's metrics.json has for them:
    pipeline, world_size, config, step_ms_p50)."""
    folder.mkdir(parents=True, exist_ok=True)
    measured = pdoc["summary"].get(variant, {})
    doc = {
        "variant": variant, "pipeline": VARIANTS[variant][0], "options": VARIANTS[variant][1], "preset": pdoc["preset"],
        "config": config_dict(cfg),
        # the method's figures of this variant (median over the timed rounds of each round's
        # median step [95 % interval]; ratios to SparseDist within rounds), not this trace run's
        "step_ms_p50": (measured.get("step") or {}).get("median"),
        "measured_summary": measured,
        "device": bench.device_name, "world_size": bench.info.world_size, "date_utc": bench.doc["date_utc"],
        "cuda_sync_events": bench.doc["process"].get("cuda_sync_events"),
        "cupti_teardown": bench.doc["process"].get("cupti_teardown"),
        "trace_run": {k: seg.get(k) for k in ("step_ms", "traced_step_ms", "host_step_ms", "traced_host_step_ms",
                                              "profiler_warmup_step_ms", "step_ms_median", "peak_reserved_bytes",
                                              "peak_allocated_bytes", "gpu_waited_share", "final_loss", "clocks", "trace_counts", "ranks")},
        "model": pdoc["model"], "data": pdoc["data"], "dense_optimizer": pdoc["dense_optimizer"],
        "main_stream_priority": pdoc["main_stream_priority"], "versions": bench.doc["versions"],
        "measured": f"bench/results/pipelines-{bench.tag}.json (preset {pdoc['preset']}, summary -> {variant})",
    }
    (folder / "metrics.json").write_text(json.dumps(doc, indent=1, default=str))


def write_commit(bench: Bench) -> None:
    """``<out>/commit/``: the results file, the sample traces' README, the README rows and the
    explain proof's manifest, in the repository's layout."""
    doc, c = bench.doc, bench.commit
    res = c / "bench" / "results"
    res.mkdir(parents=True, exist_ok=True)
    # compact: every run's rounds make ~2 MB of JSON, and the device tool carries at most 64 MiB of
    # the repository to the GPU machine (an indented file is ~40 % larger)
    (res / f"pipelines-{bench.tag}.json").write_text(json.dumps(doc, separators=(",", ":"), default=str) + "\n")
    (res / f"pipelines-{bench.tag}.md").write_text("\n".join(markdown(doc)) + "\n")
    samples = c / bench.samples_dir
    samples.mkdir(parents=True, exist_ok=True)
    lines = [f"# Pipeline traces, {doc['world_size']} x {doc['device']}", "",
             f"Written by `{doc['command']}` on {doc['date_utc']} (torch {doc['versions'].get('torch')}, "
             f"cuda_sync events {doc['process'].get('cuda_sync_events')}). One run per folder after the timed rounds "
             f"of bench/results/pipelines-{bench.tag}.md: warm-up steps, 3 untimed steps, one profiler warm-up step, "
             f"{bench.args.profile_steps} profiled steps (Kineto with `[memory]` and `cuda_sync` events), 3 tail steps. "
             "Each folder: `trace_rank*.json.gz` and `metrics.json` (the run's step times, traced and untraced, peak "
             "memory, clocks, config). The headline preset's folders are at the top; the other presets' under "
             "`<preset>/`.", ""]
    for p in doc["presets"]:
        for v, t in p["traces"].items():
            n = t.get("trace_counts") or {}
            lines.append(f"- `{Path(t['dir']).relative_to(bench.samples_dir)}/`: preset {p['preset']}, {v}; untraced "
                         f"{t['step_ms_median']:.3f} ms/step, traced steps {t['traced_step_ms']} ms; {n.get('cuda_sync')} "
                         f"cuda_sync and {n.get('memory')} [memory] events")
    (samples / "README.md").write_text("\n".join(lines) + "\n")
    wins = [(p["preset"], w) for p in doc["presets"] for w in p.get("windows", []) if w["option"] != "default"]
    if wins:
        prof = c / bench.profiler_dir
        prof.mkdir(parents=True, exist_ok=True)
        lines = [f"# Traces by profiler option set, {doc['world_size']} x {doc['device']}", "",
                 f"Written by `{doc['command']}` on {doc['date_utc']} (torch {doc['versions'].get('torch')}): the "
                 f"profiler-overhead question (issue 24). `<preset>/<variant>/<option>/`: one run of the variant with the "
                 f"profiler's options set as `runtime.profiling.PROFILER_OPTIONS[option]` (its `metrics.json`: `config.profiler`, "
                 f"the run's untraced and traced step times in `trace_run`); the `default` option's traces are "
                 f"the pipeline sample traces in `{bench.samples_dir}/`. Every run's step times, host and GPU, untraced and "
                 f"traced: `windows` of each preset in bench/results/pipelines-{bench.tag}.json.", ""]
        for preset, w in wins:
            n = w.get("trace_counts") or {}
            lines.append(f"- `{preset}/{w['variant']}/{w['option']}/`: traced steps {w.get('traced_step_ms')} ms (untraced "
                         f"{w.get('step_ms')}); {n.get('events')} events, {n.get('bytes')} bytes; trace {w.get('trace')}")
        (prof / "README.md").write_text("\n".join(lines) + "\n")
    rows = readme_rows(doc, bench.tag)
    (c / "README-rows.md").write_text("\n".join(rows) + "\n")
    pairs = []
    for before, after, fix, presets in PROOF_PAIRS:
        for p in doc["presets"]:
            if p["preset"] not in presets or before not in p["traces"] or after not in p["traces"]:
                continue
            pairs.append(proof_manifest.pipeline_pair(p, before, after, fix=fix, trace_file="trace_rank0.json.gz"))
    if pairs:
        proof_manifest.write(res / f"proof-pipelines-{bench.tag}.json", pairs, repo=c, device=doc["device"],
                             date_utc=doc["date_utc"], source=f"bench/results/pipelines-{bench.tag}.json", versions=doc["versions"])


def _cell(x) -> str:  # noqa: ANN001
    return "-" if x is None else str(x)


def _r(x, nd: int = 3):  # noqa: ANN001, ANN202
    return None if x is None else round(x, nd)


def _pct(x) -> str:  # noqa: ANN001
    return "-" if x is None else f"{100 * x:.2f} %"


def _est(e: dict | None, fmt: str = "{:.3f}", scale: float = 1.0) -> str:
    if not e:
        return "-"
    return f"{fmt.format(e['median'] * scale)} [{fmt.format(e['lo'] * scale)}, {fmt.format(e['hi'] * scale)}]"


def readme_rows(doc: dict, tag: str) -> list[str]:
    out = []
    for p in doc["presets"]:
        s = p["summary"]
        parts = [f"{v} {_est(s[v].get('ratio'))}" for v in ("fused", "semi") if v in s]
        if not parts:
            continue
        out.append(f"| pipelines, {doc['world_size']} x {doc['device']}, step time / SparseDist's, median over "
                   f"{p.get('timed_rounds')} interleaved rounds [95% CI], preset {p['preset']}"
                   f"{' (headline)' if p['headline'] else ''} | {'; '.join(parts)} | `bench/results/pipelines-{tag}.md` |")
    return out


def markdown(doc: dict) -> list[str]:
    lines = [f"# {doc['title']}", "",
             f"{doc['date_utc']}, `{doc['command']}`, torch {doc['versions'].get('torch')} (CUDA {doc['versions'].get('cuda')}); "
             f"{doc['total_s']} s in all.", "",
             f"Method (bench/common/method.py): the plan run {doc['method'].get('passes', 1)} time(s) over (each preset's rounds "
             f"spread over the call{', each pass a process of its own' if len(doc.get('processes', [])) > 1 else ''}); in each "
             "pass a warm-up round (discarded), then timed rounds; every variant once per round, in mirrored pairs of rotated "
             "orders; one run = a few warm-up steps + a few timed steps (per preset, below) + untimed tail steps (the "
             "pipeline drains there); a round's figure is the median of the variant's timed steps; ratios to SparseDist "
             "within each round; reported: median over rounds [95 % bootstrap interval, two-stage: the passes, then their "
             "rounds]. Host (bench/common/host.py): the main thread alone on one "
             "CPU, the cyclic GC off during each run, a host probe (us per tiny CPU op) right before each run.", ""]
    proc = doc.get("process", {})
    if proc:
        lines += [f"Process: CUDA context + first allocation {proc.get('cuda_first_alloc_s')} s; TBE extension "
                  f"{proc.get('tbe_extension')} in {proc.get('tbe_extension_load_s')} s; clock log {proc.get('clock_log')}; "
                  f"cuda_sync events {proc.get('cuda_sync_events')}; CPU {proc.get('cpu_model')} x {proc.get('cpu_count')}; "
                  f"pinning {proc.get('pin')}; host probe at the start {proc.get('host_probe_us')} us/op.", ""]
    for p in doc["presets"]:
        spec = p["spec"]
        lines += [f"## {p['preset']}{' (headline)' if p['headline'] else ''}", "",
                  f"batch {spec['batch']}/GPU, {spec['tables']} tables x {spec['rows']} x {spec['dim']}, pooling {spec['pooling']}, "
                  f"over arch {tuple(spec['over_arch'])}, {spec['task_heads']} task head(s), Adam foreach={spec['adam_foreach']}, "
                  f"main stream priority {spec['main_priority']}. Timed rounds: {p.get('timed_rounds', 0)} in {p.get('passes', 1)} pass(es) (+1 warm-up each) of "
                  f"runs of {(p.get('run_shape') or {}).get('warmup_steps')} warm-up + {(p.get('run_shape') or {}).get('timed_steps')} "
                  f"timed steps; setup: batches {p['setup'].get('loader_s')} s, model {p['setup'].get('model_build_s')} s.", "",
                  "| variant | step ms | / SparseDist | peak reserved GB | / SparseDist | peak alloc GB | GPU waited for host "
                  "| device allocs in timed steps | warm-up round / median |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for v in p["variants"]:
            s = p["summary"].get(v)
            if not s:
                continue
            waited = s.get("gpu_waited_share")
            warm = s.get("warmup_round_over_median")
            lines.append(
                f"| {v} | {_est(s.get('step'))} | {_est(s.get('ratio'))} | {_est(s.get('reserved_bytes'), '{:.2f}', 1e-9)} | "
                f"{_est(s.get('reserved_ratio'))} | {_est(s.get('allocated_bytes'), '{:.2f}', 1e-9)} | "
                f"{'-' if waited is None else f'{waited:.0%}'} | {_cell(s.get('device_allocs_in_timed_steps'))} | "
                f"{'-' if warm is None else f'{warm:.3f}'} |")
        backends = sorted({str(run.get("embedding_backend")) for rd in p["rounds"] for run in rd["runs"].values()})
        if backends and backends != ["cuda"]:
            lines += ["", "Embedding backend: " + ", ".join(backends) + " (NOT the CUDA kernels)"]
        if p["targets"]:
            lines += ["", "Targets: " + "; ".join(f"{k}: {'met' if ok else 'NOT met'}" for k, ok in p["targets"].items())]
        same = [v for v, s in p["summary"].items() if s.get("final_loss_equals_sparse") is False]
        if same:
            lines += ["", f"Final loss differs from SparseDist's: {', '.join(same)}"]
        host = p.get("host") or {}
        if host.get("probe_us") or host.get("involuntary_switches"):
            pr, inv = host.get("probe_us") or {}, host.get("involuntary_switches") or {}
            lines += ["", f"Host over the {host.get('runs')} timed runs: probe {_cell(_r(pr.get('median')))} us/op (P10 "
                      f"{_cell(_r(pr.get('p10')))}, P90 {_cell(_r(pr.get('p90')))}); run step / variant median against run probe / "
                      f"median probe: r = {_cell(host.get('step_vs_probe_r'))}; main thread: {_cell(inv.get('median'))} involuntary "
                      f"context switches per run (max {_cell(inv.get('max'))}), CPU share {_cell(host.get('thread_cpu_share'))}, on "
                      f"CPU(s) {host.get('cpus')}; steal {_pct(host.get('steal_share'))} and interrupts {_pct(host.get('irq_share'))} "
                      "of that CPU's time."]
        lines += ["", "Per round (step ms, median of the timed steps, and its ratio to SparseDist's in the round; host probe "
                  "us/op, median of the round's runs; SM MHz and GEMM / lookup probes where sampled before the round):", "",
                  "| round | order | " + " | ".join(p["variants"]) + " | host us/op | SM MHz | temp C | reasons | GEMM ms | lookup ms |",
                  "|---|---|" + "---|" * (len(p["variants"]) + 6)]
        for rd in p["rounds"]:
            ck = rd.get("clocks") or {}
            ref = (rd["runs"].get(REFERENCE) or {}).get("step_ms_median")
            cells = [("-" if v not in rd["runs"] else f"{rd['runs'][v]['step_ms_median']:.3f}"
                      + (f" ({rd['runs'][v]['step_ms_median'] / ref:.3f})" if ref and v != REFERENCE else "")) for v in p["variants"]]
            probe = method.median([r.get("host_probe_us") for r in rd["runs"].values()])
            lines.append(f"| {rd['round']}{' (warm-up)' if rd['warmup'] else ''} | {rd['order'][0]} first | " + " | ".join(cells)
                         + f" | {_cell(_r(probe))} | {ck.get('sm_mhz') or '-'} | {ck.get('temp_c_max') or '-'} | "
                         f"{','.join(reason_names(ck.get('reasons'))) or '-'} | {rd['probes'].get('gemm_ms', '-')} | "
                         f"{rd['probes'].get('lookup_ms', '-')} |")
        warm = next((rd for rd in p["rounds"] if rd["warmup"]), None)
        if warm is not None:
            lines += ["", "First use (the warm-up round against the timed rounds; a run's first step includes the pipeline "
                      "fill and the allocator's growth after `empty_cache`):", "",
                      "| variant | warm-up round: first step ms (host ms) | its warm-up steps ms | its median step ms "
                      "| timed rounds: first step ms | median step ms |", "|---|---|---|---|---|---|"]
            for v in p["variants"]:
                w, s = warm["runs"].get(v), p["summary"].get(v, {})
                if w is None:
                    continue
                lines.append(f"| {v} | {w['first_step_ms']:.1f} ({w['first_step_host_ms']:.1f}) | "
                             f"{', '.join(f'{x:.1f}' for x in w['warmup_step_ms'])} | {w['step_ms_median']:.3f} | "
                             f"{_cell(None if s.get('first_step_ms') is None else round(s['first_step_ms'], 1))} | "
                             f"{_cell(None if not s.get('step') else round(s['step']['median'], 3))} |")
        if p.get("windows"):
            lines += ["", "Trace runs by profiler option set (runtime.profiling.PROFILER_OPTIONS; one run each: its untimed "
                      "warm-up, its untraced timed steps, one profiler warm-up step, its traced steps; medians, ms; GPU: CUDA "
                      "events on the main stream, host: between the ends of issuing two steps):", "",
                      "| option | variant | untraced GPU | traced GPU | traced / untraced | untraced host | traced host "
                      "| events | trace |", "|---|---|---|---|---|---|---|---|---|"]
            for w in p["windows"]:
                u, t = method.median(w.get("step_ms") or []), method.median(w.get("traced_step_ms") or [])
                uh, th = method.median(w.get("host_step_ms") or []), method.median(w.get("traced_host_step_ms") or [])
                lines.append(f"| {w['option']} | {w['variant']} | {_cell(_r(u))} | {_cell(_r(t))} | "
                             f"{'-' if not u or t is None else f'{t / u:.3f}'} | {_cell(_r(uh))} | {_cell(_r(th))} | "
                             f"{(w.get('trace_counts') or {}).get('events', '-')} | {w.get('trace')} |")
        diag = p.get("diagnostics") or {}
        old = diag.get("old_method")
        if isinstance(old, dict):
            lines += ["", f"Old method (GPU idle {old['idle_s']} s, then one run each, back to back, 10 + 40 steps, P90): "
                      + ", ".join(f"{v} {r['step_ms_p90']:.3f} ms (SM {(r.get('clocks') or {}).get('sm_mhz', '-')} MHz, "
                                  f"ratio {old['p90_ratio'][v]:.3f})" for v, r in old["runs"].items())]
        elif old:
            lines += ["", f"Old method: {old}"]
        ft = diag.get("fresh_tables")
        if isinstance(ft, dict):
            lines += ["", f"Fresh tables (model built again, {ft['model_build_s']} s): "
                      + ", ".join(f"{v} {r['step_ms_median']:.3f} ms" for v, r in ft["runs"].items())
                      + f", ratio {ft['ratio']:.3f}; lookup probe {ft['probes'].get('lookup_ms', '-')} ms"]
        elif ft:
            lines += ["", f"Fresh tables: {ft}"]
        lines.append("")
    return lines


# ------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------
def _without_pass_index(argv: list[str]) -> list[str]:
    """The command line as the user gave it (the parent adds ``--pass-index K`` to its passes')."""
    out, skip = [], False
    for a in argv:
        if skip or a == "--pass-index":
            skip = not skip
            continue
        if not a.startswith("--pass-index="):
            out.append(a)
    return out


def run_passes(args) -> int:  # noqa: ANN001
    """One process per pass (``--passes``), one after another: the process is the unit that
    repeats. On 2026-11-24 the three passes of one call agreed with each other (headline 0.9369,
    0.9342, 0.9382) and not with the next call's (0.9282, 0.9320, 0.9271): an offset a process
    keeps for its life, which passes inside one process never sample. Pass K > 0 continues the
    document pass K-1 wrote (``<out>/results.json``); a SIGTERM (the time limit) goes to the pass
    running, which writes what it has, and no later pass starts."""
    me = module_command("bench.pipelines", *sys.argv[1:])  # no --pass-index here (main)
    stop = False
    child: subprocess.Popen | None = None

    def on_term(*_) -> None:  # noqa: ANN002
        nonlocal stop
        stop = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    rc = 0
    for k in range(args.passes):
        if stop:
            break
        child = subprocess.Popen([*me, "--pass-index", str(k)], env=repo_env())
        rc = child.wait()
        if rc != 0:
            break
    return 143 if stop and rc == 0 else rc


def parse_profile_options(text: str | None) -> list[str]:
    """The option sets of ``--profile-options``, "default" first (added where missing)."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    bad = [n for n in names if n not in PROFILER_OPTIONS]
    if bad:
        raise ValueError(f"unknown --profile-options {bad} (known: {', '.join(PROFILER_OPTIONS)})")
    return ["default"] + [n for n in dict.fromkeys(names) if n != "default"]


def parse_plan(text: str | None) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(preset, variants, traced variants) of the built-in plan or of ``--plan`` (whose presets
    trace the TRACED variants they have)."""
    if not text:
        return [(p, list(vs), tr) for p, vs, tr in PLAN]
    plans = []
    for item in text.split(","):
        preset, _, vs = item.partition(":")
        names = [v for v in vs.split("+") if v] or list(MAIN)
        if REFERENCE not in names:
            names.insert(0, REFERENCE)  # every ratio is to SparseDist, measured in the same round
        plans.append((preset, names, TRACED))
    return plans


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--gpus", type=int, default=1, help="ranks (one GPU each); > 1 relaunches under torch.distributed.run")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke test of the script (gloo)")
    ap.add_argument("--plan", default=None, help="PRESET[:VARIANT+VARIANT...],... (default: the built-in plan, headline "
                    "first; sparse is added where missing)")
    ap.add_argument("--warmup-steps", type=int, default=None, help="steps before the timed ones in every run "
                    "(default: the preset's, 3 on the multitask presets)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per run (default: the preset's, 4 on the multitask presets)")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds at most, after the warm-up round "
                    "(default: the preset's plan, fewer when the budget is short)")
    ap.add_argument("--min-rounds", type=int, default=6, help="timed rounds at least, whatever the budget "
                    "(even: whole mirrored pairs of orders, bench/common/method.py)")
    ap.add_argument("--profile-steps", type=int, default=2, help="profiled steps of each trace run (0: no traces)")
    ap.add_argument("--profile-options", default="default", help="profiler option sets (runtime.profiling.PROFILER_OPTIONS: "
                    + ", ".join(PROFILER_OPTIONS) + "), comma-separated: one trace run of each traced variant under each "
                    "(the profiler-overhead question); 'default' (the runtime's) is always among them")
    ap.add_argument("--window-variants", default=None, help="variants that get the non-default option sets' trace "
                    "runs, comma-separated (default: every traced variant)")
    ap.add_argument("--window-trace-max-mb", type=float, default=0.0, help="a trace run's traces of a non-default option "
                    "set larger than this are deleted (their counts and times stay); 0: no limit")
    ap.add_argument("--window-traces-max-mb", type=float, default=0.0, help="the non-default option sets' traces of "
                    "the call in all: past this, further ones are deleted; 0: no limit")
    ap.add_argument("--idle-s", type=float, default=20.0, help="diagnostics: GPU idle before the old method's runs")
    ap.add_argument("--diagnostics", action="store_true", help="also the old method after an idle GPU and the "
                    "model built afresh (the first call's questions, answered in bench/NOTES-pipelines.md: ~60 s)")
    ap.add_argument("--no-pin", dest="pin", action="store_false", help="leave the threads where the scheduler puts "
                    "them (default: the main thread alone on one CPU, bench/common/host.py)")
    ap.add_argument("--clock-log-ms", type=int, default=0, help="nvidia-smi's clock log: a sampling loop at this "
                    "interval throughout (a process beside the benchmark); 0: one query between rounds")
    ap.add_argument("--clock-every-s", type=float, default=15.0, help="clock sample and GEMM/lookup probes between "
                    "rounds at most this often")
    ap.add_argument("--label", default=None, help="suffix of the results' file names (default: the start's UTC HHMM, "
                    "none with --date)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--date", default=None, help="YYYYMMDD for the file names (default: today, UTC)")
    ap.add_argument("--passes", type=int, default=6, help="times the plan is run over, each preset's timed rounds "
                    "split between the passes (a warm-up round in each): its rounds spread over the whole call; each "
                    "pass in a process of its own")
    ap.add_argument("--pass-index", type=int, default=None, help="run pass K only (K > 0 continues <out>/results.json "
                    "of pass K-1); without it, the passes run one after another, each in a process of its own")
    ap.add_argument("--one-process", action="store_true", help="every pass in this one process (the method before "
                    "2026-11-24 session 2)")
    ap.add_argument("--budget-s", type=float, default=280.0,
                    help="seconds for the whole benchmark: the timed rounds of each preset are as many as fit its share")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench.pipelines: error: needs a CUDA GPU (or --device cpu)", file=sys.stderr)
        return 2
    if (args.min_rounds < 1 or (args.rounds is not None and args.rounds < args.min_rounds)
            or (args.steps is not None and args.steps < 1) or (args.warmup_steps is not None and args.warmup_steps < 0)
            or args.passes < 1 or (args.pass_index is not None and not 0 <= args.pass_index < args.passes)):
        print("bench.pipelines: error: need 1 <= --min-rounds <= --rounds, --steps >= 1, --warmup-steps >= 0, --passes >= 1, "
              "0 <= --pass-index < --passes", file=sys.stderr)
        return 2
    if args.pass_index and not (Path(args.out) / "results.json").exists():
        print(f"bench.pipelines: error: --pass-index {args.pass_index} continues {Path(args.out) / 'results.json'}, "
              "which is not there", file=sys.stderr)
        return 2
    try:
        parse_profile_options(args.profile_options)
        if args.window_variants and any(v not in VARIANTS for v in args.window_variants.split(",")):
            raise ValueError(f"unknown --window-variants {args.window_variants!r}")
    except ValueError as e:
        print(f"bench.pipelines: error: {e}", file=sys.stderr)
        return 2
    if args.label is not None and not args.label.replace("-", "").replace("_", "").isalnum():
        print("bench.pipelines: error: --label takes letters, digits, '-' and '_'", file=sys.stderr)
        return 2
    if args.passes > 1 and args.pass_index is None and not args.one_process:
        return run_passes(args)
    if args.gpus > 1 and "RANK" not in os.environ:
        if args.device == "cuda" and torch.cuda.device_count() < args.gpus:
            print(f"bench.pipelines: error: --gpus {args.gpus} but {torch.cuda.device_count()} GPU(s) here", file=sys.stderr)
            return 2
        cmd = module_command("torch.distributed.run", "--standalone", f"--nproc-per-node={args.gpus}",
                             "-m", "bench.pipelines", *sys.argv[1:])
        return subprocess.run(cmd, env=repo_env()).returncode
    plans = parse_plan(args.plan)
    bad = [p for p, _, _ in plans if p not in PRESETS] + [v for _, vs, _ in plans for v in vs if v not in VARIANTS]
    if bad or len({p for p, _, _ in plans}) != len(plans):
        print(f"bench.pipelines: error: unknown or repeated presets/variants {bad or [p for p, _, _ in plans]}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below, then exit
    info = init_from_env(args.device)
    bench = Bench(args, info)
    try:
        bench.start_process()
        # each preset's share of the budget: its planned time (step x runs per round x steps per run x rounds)
        weights = [PRESETS[p]["est_step_ms"] * len(vs) * (lambda w, t, r: (w + t + TAIL_STEPS) * r)(*run_shape(args, PRESETS[p]))
                   for p, vs, _ in plans]
        # the plan --passes times over: each preset's rounds spread over the whole call
        schedule = [(k, i) for k in range(args.passes) for i in range(len(plans))]
        for j, (k, i) in enumerate(schedule):
            if args.pass_index is not None and k != args.pass_index:
                continue  # another process's pass
            left = args.budget_s - bench.now()
            share = left * weights[i] / sum(weights[i2] for _, i2 in schedule[j:])
            preset, names, traced = plans[i]
            bench.preset(preset, names, traced=traced, headline=i == 0, share_s=share, pass_index=k, passes=args.passes)
    finally:  # also on SIGTERM (a time limit): the figures of every round that ran
        for p in bench.doc["presets"]:
            bench.summarize(p)
        if bench.clocks is not None:
            bench.clocks.stop()
        if info.rank == 0:
            write_commit(bench)
            bench.publish()
            if args.pass_index in (None, args.passes - 1):
                print((bench.out / "results.md").read_text(), file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
