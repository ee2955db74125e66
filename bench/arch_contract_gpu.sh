#!/usr/bin/env bash
# Issue 12 (engine registry and doors) before/after on the GPU host, in one go.
#
# Before the run, on the CI machine, in the repository root:
#     git archive -o shared/arch_old.tar 7782fe8      # the tree before issue 12
# On the device (repository root = the tree after issue 12), after DEVICE.md's prelude:
#     bash bench/arch_contract_gpu.sh shared/arch_old.tar
# Writes under $OUT: arch_{old,new}_{1,2,3}.json (pytest-benchmark; GCUPS in extra_info),
# their logs, and arch_checks.log (golden cases and the engine's table tests on the GPU).
set -u
OUT=${OUT:-/tmp/arch_out}
mkdir -p "$OUT"
NEW=$PWD
OLD=/tmp/arch_old
rm -rf "$OLD" && mkdir -p "$OLD" && tar -xf "$1" -C "$OLD"
BENCHES="bench/test_opencl_papara.py bench/test_opencl_search.py"
for rep in 1 2 3; do
  for side in old new; do
    if [ "$side" = old ]; then dir=$OLD; else dir=$NEW; fi
    (cd "$dir" && PYTHONPATH="$dir" timeout 120 python -m pytest -q -p no:cacheprovider \
      -o addopts="" $BENCHES --benchmark-only \
      --benchmark-json="$OUT/arch_${side}_${rep}.json") > "$OUT/arch_${side}_${rep}.log" 2>&1
  done
done
(cd "$NEW" && PYTHONPATH="$NEW" timeout 240 python -m pytest -q -p no:cacheprovider --run-slow \
  tests/test_engine.py tests/test_papara_golden.py tests/test_opencl_papara.py tests/test_hybrid.py \
  tests/test_opencl_search.py) > "$OUT/arch_checks.log" 2>&1
echo "checks exit code: $?" >> "$OUT/arch_checks.log"
python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(f"{out}/arch_*_*.json")):
    side = path.rsplit("/", 1)[1].split("_")[1]
    for b in json.load(open(path))["benchmarks"]:
        g = b.get("extra_info", {}).get("gcups")
        if g is not None:
            rows.setdefault(b["name"], {}).setdefault(side, []).append(g)
for name, sides in rows.items():
    old, new = sides.get("old", []), sides.get("new", [])
    if old and new:
        print(f"{name}: new {statistics.median(new):.1f} / old {statistics.median(old):.1f} GCUPS"
              f" (median of {len(new)}; new {min(new):.1f}-{max(new):.1f}, old {min(old):.1f}-{max(old):.1f})")
PY
