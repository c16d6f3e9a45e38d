#!/bin/bash
# usage: bash bench/report_snapshot.sh OUTDIR   (from a checkout, its venv active)
# Every JSON report tracekit writes for the public and sample traces (and the bench stand-ins
# when bench/data has them), `analyze` and `explain`, with no cache, plus stderr and the exit
# code of each: two snapshots (before/after a change) compare with `diff -r A B`, which must
# print nothing.
set -u
out=$1; mkdir -p "$out"
shared=$(cd "$(dirname "$0")/../.." && pwd)/shared/traces/public
[ -d "$shared" ] || shared=/work/shared/traces/public
files=$( (find "$shared" sample_traces -name '*.json.gz'; ls bench/data/syn2r.json.gz bench/data/sparse3r.json.gz 2>/dev/null) | sort)
for f in $files sample_traces/pipelines_2gpu/sparse sample_traces/pipelines_2gpu/fused; do
  n=$(echo "${f#"$shared"/}" | tr '/' '_')
  python -m tracekit.cli analyze --no-cache --format json "$f" > "$out/$n.analyze.json" 2> "$out/$n.analyze.err"
  echo "rc $?" >> "$out/$n.analyze.err"
  if [ -f "$f" ]; then
    python -m tracekit.cli explain --no-cache --format json "$f" > "$out/$n.explain.json" 2> "$out/$n.explain.err"
    echo "rc $?" >> "$out/$n.explain.err"
  fi
done
python -m tracekit.cli analyze --no-cache --format json sample_traces/pipelines_2gpu/sparse --detail > "$out/dir_detail.json" 2>&1
python -m tracekit.cli explain --no-cache --format json --step 52 sample_traces/pipelines_1gpu/sparse/trace_rank0.json.gz > "$out/explain_step.json" 2>&1
