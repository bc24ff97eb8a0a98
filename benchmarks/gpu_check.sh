#!/usr/bin/env bash
# GPU check of gpulease.train, under 5 minutes on one GPU: bf16/fp16/tf32 vs fp32 step speed-up of
# a transformer block, TF32 matmul speed-up, checkpoint throughput to local disk, MFU; then the
# agent's NVML sampler on the real GPU (benchmarks/gpu/nvml_check.py: a real agent's
# GET /v1/metrics has a utilisation, memory and power for every GPU); then the node bench,
# `python -m gpulease.bench --json` in full (matmul per dtype against the dense peaks, memory and
# host<->device bandwidth, training steps...; docs/bench.md), its table and report kept in
# $BENCH_OUT (default benchmarks/bench/results/<date>-gpu.txt), under its own 5-minute limit.
# Not with --allow-cpu.
#
#   benchmarks/gpu_check.sh [--out PATH.json] [--allow-cpu] [other benchmarks/gpu/run.py options]
#
# Runs benchmarks/gpu/run.py with the project's .venv python (or $PYTHON) under a 5-minute limit;
# results go to --out (default benchmarks/gpu/results/<date>-<part>.json) plus a .md summary.
# Without a GPU it exits 2 unless --allow-cpu (a tiny CPU smoke run, for the tests; the NVML
# check then only says it found no GPU).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$root/.venv/bin/python" ]]; then python="$root/.venv/bin/python"; else python=python3; fi
fi

status=0
timeout --kill-after=10 300 "$python" "$root/benchmarks/gpu/run.py" "$@" || status=$?
if [[ $status -eq 124 || $status -eq 137 ]]; then
  echo "gpu_check: stopped at the 5-minute limit; the sections that finished are in the --out file" >&2
fi
if [[ $status -eq 0 ]]; then
  nvml_args=()
  for arg in "$@"; do [[ "$arg" == "--allow-cpu" ]] && nvml_args+=(--allow-none); done
  timeout --kill-after=10 60 "$python" "$root/benchmarks/gpu/nvml_check.py" "${nvml_args[@]}" \
    || status=$?
fi
if [[ $status -eq 0 && ! " $* " =~ " --allow-cpu " ]]; then
  bench_out="${BENCH_OUT:-$root/benchmarks/bench/results/$(date -u +%F)-gpu.txt}"
  mkdir -p "$(dirname "$bench_out")"
  store="$(mktemp -d)"
  PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" timeout --kill-after=10 300 \
    "$python" -m gpulease.bench --json --workdir "$(dirname "$store")" --store "local://$store" \
    | tee "$bench_out" || status=$?
  rm -rf "$store"
fi
exit "$status"
