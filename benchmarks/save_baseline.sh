#!/usr/bin/env bash
# Save a baseline of the timing suite, module by module (each module's groups in its own JSON
# under benchmarks/baselines/<machine>/), so that a long run interrupted part-way keeps what it
# measured. Usage: bash benchmarks/save_baseline.sh [--bench-size default] [modules...]
set -uo pipefail
cd "$(dirname "$0")/.."
size=default
if [[ "${1:-}" == "--bench-size" ]]; then size=$2; shift 2; fi
modules=("$@")
if [[ ${#modules[@]} -eq 0 ]]; then
    modules=(bench_erm_paper bench_amp bench_bayes bench_erm_lam_grid bench_theory
             bench_sampler_nutpie bench_population bench_sweep)
fi
py=${PYTHON:-.venv/bin/python}
for m in "${modules[@]}"; do
    echo "== $m ($size), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%S)"
    "$py" -m pytest "benchmarks/$m.py" --benchmark-only --bench-size "$size" \
        --benchmark-storage=benchmarks/baselines --benchmark-save="${size}_${m#bench_}" \
        --benchmark-columns=min,median,max,rounds -q -p no:cacheprovider
done
