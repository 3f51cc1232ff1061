#!/usr/bin/env bash
# A short, fixed set of benchmarks, appended with the commit to
# docs/bench/history.jsonl, so that a regression shows the day it lands.
#
#   scripts/bench_history.sh [--baseline DIR] [--rounds N] [--data FILE] [--no-append]
#
# --baseline DIR  a folder holding the `causeway` binary of an earlier build
#                 (e.g. the last release's): every figure is then measured
#                 interleaved, baseline and current in turn, and reported as
#                 a ratio of medians from the same run.
# --rounds N      rounds per figure (default 3); the median is kept.
# --data FILE     the text `train lm` trains on (default: $CAUSEWAY_BENCH_DATA;
#                 BENCHMARKS.md uses tinyshakespeare). Without one, that figure
#                 is skipped.
# --no-append     print, do not record.
#
# Every figure is higher-is-better. The script prints each against the last
# entry of the history and flags any more than 15 % worse; it exits 3 when
# one is (after recording), so that a caller can stop on it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=build/release/bin/causeway
baseline=""
rounds=3
data=${CAUSEWAY_BENCH_DATA:-}
append=1
while (($#)); do
  case "$1" in
    --baseline) baseline="$2/causeway"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --no-append) append=0; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "bench_history.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$bin" ]] || { echo "bench_history.sh: build first (make build): no $bin" >&2; exit 2; }
[[ -z "$baseline" || -x "$baseline" ]] || { echo "bench_history.sh: no $baseline" >&2; exit 2; }
[[ -z "$data" || -f "$data" ]] || { echo "bench_history.sh: no file $data (--data)" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "bench_history.sh: --rounds 1 to 99" >&2; exit 2; }

# name | command (after the binary) | python expression over `d`, the last JSON line
figures=(
  "dispatch_opbyop_add_1dev_per_s|bench dispatch --mode opbyop --devices 1 --hosts 1 --computation add --seconds 1 --json|d['computations_per_second']"
  "dispatch_opbyop_8dev_per_s|bench dispatch --mode opbyop --devices 8 --hosts 1 --seconds 1 --json|d['computations_per_second']"
  "dispatch_chained_8dev_per_s|bench dispatch --mode chained --devices 8 --hosts 1 --seconds 1 --json|d['computations_per_second']"
  "dispatch_fused_8dev_per_s|bench dispatch --mode fused --devices 8 --hosts 1 --seconds 1 --json|d['computations_per_second']"
  "utilization_500us_compute_fraction|bench utilization --devices 8 --hosts 2 --compute-us 500 --seconds 1 --json|d['rows'][0]['compute_fraction']"
  "matmul_512_gflops|bench matmul --sizes 512 --json|d['gflops_function']"
  "all_reduce_1mib_busbw_gbps|bench collective --op all-reduce --bytes 1048576 --devices 8 --hosts 2 --json|d['busbw_gbps']"
)
if [[ -n "$data" ]]; then
  figures+=("train_lm_200_tokens_per_s|train lm --data $data --iters 200 --eval-every 0 --log-every 0 --json|d['tokens_per_s']")
else
  echo "bench_history.sh: no text to train on (--data FILE); train lm is skipped" >&2
fi

# Runs `$1 $2` and prints the figure `$3` of its last JSON line ("null" on failure).
measure() {
  local out
  if ! out=$("$1" $2 2>/dev/null | grep '^{' | tail -1); then out=""; fi
  python3 -c '
import json, sys
try:
    d = json.loads(sys.argv[1]); print(float(eval(sys.argv[2])))
except Exception:
    print("null")' "$out" "$3"
}

median() { python3 -c 'import statistics, sys
v = [float(x) for x in sys.argv[1:] if x != "null"]
print(statistics.median(v) if v else "null")' "$@"; }

declare -A now base
for f in "${figures[@]}"; do
  IFS='|' read -r name cmd expr <<<"$f"
  cur=(); old=()
  for ((r = 0; r < rounds; r++)); do
    [[ -n "$baseline" ]] && old+=("$(measure "$baseline" "$cmd" "$expr")")
    cur+=("$(measure "$bin" "$cmd" "$expr")")
  done
  now[$name]=$(median "${cur[@]}")
  [[ -n "$baseline" ]] && base[$name]=$(median "${old[@]}")
  show() { [[ "$1" == null ]] && printf '%14s' failed || printf '%14.4g' "$1"; }
  printf '%-38s ' "$name"; show "${now[$name]}"
  if [[ -n "$baseline" ]]; then printf '   baseline '; show "${base[$name]}"; fi
  printf '\n'
done

commit=$(git rev-parse --short HEAD)
dirty=$([[ -n "$(git status --porcelain --untracked-files=no)" ]] && echo true || echo false)
entry=$(
  for name in "${!now[@]}"; do echo "$name=${now[$name]}=${base[$name]:-}"; done |
    python3 -c '
import json, os, platform, sys, datetime
figures, baseline = {}, {}
for line in sys.stdin:
    name, v, b = line.rstrip("\n").split("=")
    figures[name] = None if v == "null" else float(v)
    if b:
        baseline[name] = None if b == "null" else float(b)
cpu = ""
try:
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
except Exception:
    pass
e = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
     "commit": sys.argv[1], "dirty": sys.argv[2] == "true", "rounds": int(sys.argv[3]),
     "machine": {"cpus": os.cpu_count(), "cpu": cpu, "system": platform.platform()},
     "figures": dict(sorted(figures.items()))}
if baseline:
    e["baseline_figures"] = dict(sorted(baseline.items()))
    e["baseline"] = sys.argv[4]
print(json.dumps(e))' "$commit" "$dirty" "$rounds" "$baseline"
)

history=docs/bench/history.jsonl
mkdir -p "$(dirname "$history")"
status=0
python3 -c '
import json, sys
entry = json.loads(sys.argv[1])
last = None
try:
    lines = [l for l in open(sys.argv[2]) if l.strip()]
    last = json.loads(lines[-1]) if lines else None
except FileNotFoundError:
    pass
worse = 0
def compare(label, old_figures):
    global worse
    print(label)
    for k, v in entry["figures"].items():
        o = old_figures.get(k)
        if v is None or not o:
            print(f"  {k:38s} {v!s:>14s}   (no comparison)")
            continue
        r = v / o
        flag = "   WORSE by more than 15 %" if r < 0.85 else ""
        worse += r < 0.85
        print(f"  {k:38s} {v:14.4g}   {r:6.3f}x{flag}")
if "baseline_figures" in entry:
    compare("against the baseline, in the same run:", entry["baseline_figures"])
if last is not None:
    when = "%s, %s" % (last["commit"], last["date"])
    compare(f"against the last entry ({when}):", last["figures"])
sys.exit(3 if worse else 0)' "$entry" "$history" || status=$?
if ((append)); then
  echo "$entry" >>"$history"
  echo "appended to $history"
fi
exit "$status"
