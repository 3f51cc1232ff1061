#!/bin/bash
# `causeway train lm` and `causeway sample` end to end on a text file that
# Debian ships (the GPL text): a tiny model trains, checkpoints, resumes and
# samples on the embedded cluster and on a distributed one started with
# `cluster up`; each bad input ends with one line on stderr naming the
# problem and a non-zero exit. Usage: train_lm_cli_test.sh path/to/causeway
set -euo pipefail
bin=$1
text=/usr/share/common-licenses/GPL-3
dir=$(mktemp -d)
up=
cleanup() {
  [ -n "$up" ] && kill -KILL "$up" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
small=(--layers 1 --heads 2 --context 16 --batch 4 --eval-batches 2)
tiny=("${small[@]}" --embed 16)

# Train, checkpoint at the end, read the JSON summary.
"$bin" train lm --data "$text" "${tiny[@]}" --iters 10 --eval-every 5 --log-every 5 \
  --checkpoint "$dir/ck" --json >"$dir/train.json"
python3 - "$dir/train.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
events = [l["event"] for l in lines]
assert events[0] == "start" and events[-1] == "summary", events
assert events.count("eval") == 3, events            # at 0, 5 and 10
steps = [l for l in lines if l["event"] == "step"]
assert [s["iteration"] for s in steps] == [0, 5, 9], steps
# No estimate from the first step alone (it includes compiling), then one.
assert steps[0]["eta_s"] is None and steps[1]["eta_s"] >= 0, steps
s = lines[-1]
assert s["iterations"] == 10 and s["tokens_per_s"] > 0 and s["val_loss"] < 5, s
PY
# On the embedded cluster checkpoints are sharded: a step folder, its
# manifest written last.
test -s "$dir/ck/step-00000010/manifest.json"
test ! -e "$dir/ck/model.safetensors"

# Resume to 12 iterations: starts at 10.
"$bin" train lm --data "$text" "${tiny[@]}" --iters 12 --eval-every 0 \
  --checkpoint "$dir/ck" --resume --json >"$dir/resume.json"
grep -q '"first_iteration":10' "$dir/resume.json"
grep -q '"iterations":2' "$dir/resume.json"

# The learning-rate schedule goes on as recorded: the first run's cosine
# decay (after --warmup 2) ended at its --iters (10), so a resume to 14
# stays at --min-lr, unless it gives --lr-decay-iters anew. (In the file
# format, gathered to this process, which a resume reads as well.)
"$bin" train lm --data "$text" "${tiny[@]}" --iters 10 --eval-every 0 --log-every 0 \
  --min-lr 0.0002 --warmup 2 --checkpoint "$dir/sched" --checkpoint-format file >/dev/null
test -s "$dir/sched/model.safetensors"
cp -r "$dir/sched" "$dir/sched2"
"$bin" train lm --data "$text" "${tiny[@]}" --iters 14 --eval-every 0 --log-every 1 \
  --checkpoint "$dir/sched" --checkpoint-format file --resume --json >"$dir/sched_resume.json"
"$bin" train lm --data "$text" "${tiny[@]}" --iters 14 --eval-every 0 --log-every 1 \
  --checkpoint "$dir/sched2" --checkpoint-format file --resume --lr-decay-iters 20 --json \
  >"$dir/sched_redecay.json"
python3 - "$dir/sched_resume.json" "$dir/sched_redecay.json" <<'PY'
import json, sys
def lrs(path):
    return [l["lr"] for l in map(json.loads, open(path)) if l["event"] == "step"]
kept, redecayed = lrs(sys.argv[1]), lrs(sys.argv[2])
assert len(kept) == 4 and all(abs(x - 2e-4) < 1e-9 for x in kept), kept
assert len(redecayed) == 4 and all(x > 2.5e-4 for x in redecayed), redecayed
PY

# SIGTERM (as Ctrl-C's SIGINT) mid-run: the queued steps finish, a
# checkpoint is written, the resuming command is printed, exit 128+15.
# The signal goes once the first step's line is out (no sleeps).
mkfifo "$dir/progress"
"$bin" train lm --data "$text" "${tiny[@]}" --iters 100000 --eval-every 0 --log-every 1 \
  --checkpoint "$dir/int" >"$dir/progress" &
pid=$!
rc=0
{
  while IFS= read -r line; do
    echo "$line" >>"$dir/interrupted.txt"
    if [[ "$line" == iter* ]] && [ ! -e "$dir/sent" ]; then
      kill -TERM "$pid"
      touch "$dir/sent"
    fi
  done
} <"$dir/progress"
wait "$pid" || rc=$?
[ "$rc" -eq 143 ] || { cat "$dir/interrupted.txt"; echo "interrupted train lm exited $rc"; exit 1; }
grep -q "^interrupted (SIGTERM) at iteration" "$dir/interrupted.txt"
ls "$dir"/int/step-*/manifest.json >/dev/null
resume=$(sed -n 's/^resume with: //p' "$dir/interrupted.txt")
[[ "$resume" == *"--checkpoint $dir/int"*"--resume" ]] || { echo "resume command: $resume"; exit 1; }
at=$(sed -n 's/^interrupted (SIGTERM) at iteration \([0-9]*\);.*/\1/p' "$dir/interrupted.txt")
"$bin" train lm --data "$text" "${tiny[@]}" --iters $((at + 2)) --eval-every 0 \
  --checkpoint "$dir/int" --resume --json >"$dir/int_resume.json"
grep -q "\"first_iteration\":$at" "$dir/int_resume.json"

# Data- and tensor-parallel at once: the same losses as one device.
"$bin" train lm --data "$text" "${tiny[@]}" --iters 6 --eval-every 0 --log-every 1 --json \
  >"$dir/one.json"
"$bin" train lm --data "$text" "${tiny[@]}" --iters 6 --eval-every 0 --log-every 1 --json \
  --mesh data=2,model=2 >"$dir/mesh.json"
python3 - "$dir/one.json" "$dir/mesh.json" <<'PY'
import json, sys
def losses(path):
    return [l["loss"] for l in map(json.loads, open(path)) if l["event"] == "step"]
one, mesh = losses(sys.argv[1]), losses(sys.argv[2])
assert len(one) == 6 and len(mesh) == 6, (one, mesh)
assert all(abs(a - b) < 1e-3 for a, b in zip(one, mesh)), (one, mesh)
PY

# Sampling is seeded.
a=$("$bin" sample --checkpoint "$dir/ck" --tokens 30 --seed 3)
b=$("$bin" sample --checkpoint "$dir/ck" --tokens 30 --seed 3)
[ "$a" = "$b" ] || { echo "samples differ: '$a' vs '$b'"; exit 1; }
[ "${#a}" -ge 30 ] || { echo "sample too short: '$a'"; exit 1; }
# A step folder names it as well as the folder of steps (whose newest is 12).
c=$("$bin" sample --checkpoint "$dir/ck/step-00000012" --tokens 30 --seed 3)
[ "$a" = "$c" ] || { echo "sample from the step folder differs: '$a' vs '$c'"; exit 1; }
# And a file checkpoint's file as well as its folder.
a=$("$bin" sample --checkpoint "$dir/sched" --tokens 30 --seed 3)
c=$("$bin" sample --checkpoint "$dir/sched/model.safetensors" --tokens 30 --seed 3)
[ "$a" = "$c" ] || { echo "sample from the file differs: '$a' vs '$c'"; exit 1; }

# A sharded checkpoint resumes onto another layout: two devices with the
# optimiser's moments sharded (saved flat), resumed on one, give the losses
# of an uninterrupted two-device run.
"$bin" train lm --data "$text" "${tiny[@]}" --iters 6 --eval-every 0 --log-every 1 --json \
  --devices 2 >"$dir/straight.json"
"$bin" train lm --data "$text" "${tiny[@]}" --iters 4 --eval-every 0 --log-every 1 --json \
  --devices 2 --checkpoint "$dir/flat" >/dev/null
"$bin" train lm --data "$text" "${tiny[@]}" --iters 6 --eval-every 0 --log-every 1 --json \
  --checkpoint "$dir/flat" --resume >"$dir/flat_resume.json"
python3 - "$dir/straight.json" "$dir/flat_resume.json" "$dir/flat/step-00000004/manifest.json" <<'PY'
import json, sys
def losses(path):
    return {l["iteration"]: l["loss"] for l in map(json.loads, open(path)) if l["event"] == "step"}
straight, resumed = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(resumed) == [4, 5], resumed
assert all(abs(straight[i] - resumed[i]) < 1e-3 for i in resumed), (straight, resumed)
manifest = json.load(open(sys.argv[3]))
names = {a["name"] for a in manifest["arrays"]}
assert {"adam_m.flat", "adam_v.flat"} <= names and manifest["metadata"]["flat_data"] == "2", names
assert manifest["metadata"]["iteration"] == "4", manifest["metadata"]
PY

# Bad input: a non-zero exit and one line on stderr that names the problem.
expect_error() {
  local want=$1; shift
  if "$@" >"$dir/out" 2>"$dir/err"; then echo "succeeded: $*"; exit 1; fi
  if [ "$(wc -l <"$dir/err")" -ne 1 ] || ! grep -q -- "$want" "$dir/err"; then
    echo "for: $*"; echo "expected one line with '$want', got:"; cat "$dir/err"; exit 1
  fi
  echo "refused as expected: $(cat "$dir/err")"
}
printf 'short text' >"$dir/short.txt"
: >"$dir/empty.txt"
expect_error "cannot read data file" "$bin" train lm --data "$dir/none.txt" "${tiny[@]}"
expect_error "is empty" "$bin" train lm --data "$dir/empty.txt" "${tiny[@]}"
expect_error "too short" "$bin" train lm --data "$dir/short.txt" "${tiny[@]}"
expect_error "not divisible by the data axis" \
  "$bin" train lm --data "$text" "${tiny[@]}" --devices 3 --parallel data
expect_error "heads are not divisible by the model axis" \
  "$bin" train lm --data "$text" "${tiny[@]}" --mesh data=1,model=4
expect_error "loss is .* at iteration 1" \
  "$bin" train lm --data "$text" "${tiny[@]}" --iters 5 --lr 1e30 --warmup 0 --grad-clip 0
expect_error "another model" \
  "$bin" train lm --data "$text" "${small[@]}" --embed 32 --checkpoint "$dir/ck" --resume
expect_error "another vocabulary" \
  "$bin" train lm --data "$text" "${tiny[@]}" --tokenizer bytes --checkpoint "$dir/ck" --resume
expect_error "not a Causeway LM checkpoint\|cannot open" \
  "$bin" sample --checkpoint "$dir/none"

# Flags that do not go together exit 2, and so does a resume that leaves
# nothing to train (the checkpoint is at iteration 12).
expect_usage() {
  local want=$1; shift
  local rc=0
  "$@" >"$dir/out" 2>"$dir/err" || rc=$?
  if [ "$rc" -ne 2 ] || ! grep -q -- "$want" "$dir/err"; then
    echo "for: $*"; echo "expected exit 2 and '$want', got $rc:"; cat "$dir/err"; exit 1
  fi
  echo "refused as expected (exit 2): $(head -1 "$dir/err")"
}
expect_usage "--checkpoint" "$bin" train lm --data "$text" "${tiny[@]}" --resume
expect_usage "is not a folder" "$bin" train lm --data "$text" "${tiny[@]}" \
  --checkpoint "$dir/sched/model.safetensors" --resume
expect_usage "at iteration 12, and --iters 12 leaves nothing to train" \
  "$bin" train lm --data "$text" "${tiny[@]}" --iters 12 --checkpoint "$dir/ck" --resume

# A pipeline over two islands, traced: tracks named by island, host and
# device; every piece sent between the islands drawn from its send to its
# arrival, at least the emulated network's latency long.
piped=(--layers 2 --heads 2 --context 16 --batch 4 --embed 16)
"$bin" train lm --data "$text" "${piped[@]}" --iters 3 --eval-every 0 --parallel pipeline \
  --stages 2 --microbatches 2 --islands 2 --dcn-latency-us 300 --trace "$dir/trace.json" \
  --json >/dev/null
python3 - "$dir/trace.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
assert names == {"island 0 / host 0", "island 1 / host 1", "scheduler", "client 0"}, names
assert any(e.get("name") == "thread_name" for e in events)
flights = [e for e in events if e.get("name") == "in flight"]
assert flights, "no transfer drawn from send to arrival"
assert min(e["dur"] for e in flights) >= 300, min(e["dur"] for e in flights)
starts = {e["id"] for e in events if e.get("ph") == "s"}
ends = {e["id"] for e in events if e.get("ph") == "f"}
assert starts == ends and len(starts) == len(flights)
PY

# The same on a distributed cluster (coordinator and worker processes). Its
# token record goes to a directory of this test's own, where commands given
# no --cluster find it.
export XDG_RUNTIME_DIR="$dir/run"
mkdir -m 700 "$XDG_RUNTIME_DIR"
mkfifo "$dir/up"
"$bin" cluster up --islands 1 --hosts-per-island 2 --devices-per-host 1 --json \
  >"$dir/up" 2>"$dir/up.err" &
up=$!
exec 3<"$dir/up"
read -r -t 60 -u 3 line || { echo "cluster up printed nothing"; cat "$dir/up.err"; exit 1; }
addr=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["address"])' "$line")
export CAUSEWAY_TOKEN=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["token"])' "$line")
"$bin" cluster status --cluster "$addr" --wait-devices 2 >/dev/null
timeout 120 "$bin" train lm --cluster "$addr" --data "$text" "${tiny[@]}" --iters 4 \
  --eval-every 2 --devices 2 --checkpoint "$dir/remote" --json >"$dir/remote.json"
grep -q '"event":"summary"' "$dir/remote.json"
# Traced on the distributed cluster: events from both workers, the island
# scheduler and this client, collected through the coordinator; pieces sent
# between the workers drawn from their send (one process) to their arrival
# (the other).
timeout 120 "$bin" train lm --cluster "$addr" --data "$text" "${piped[@]}" --iters 3 \
  --eval-every 0 --parallel pipeline --stages 2 --microbatches 2 --trace "$dir/remote-trace.json" \
  --json >/dev/null
python3 - "$dir/remote-trace.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
pids = {e["args"]["name"]: e["pid"] for e in events if e.get("name") == "process_name"}
assert {"island 0 / host 0", "island 0 / host 1", "scheduler"} <= set(pids), pids
clients = [n for n in pids if n.startswith("client ")]
assert len(clients) == 1, pids
def on(name, cat):
    return [e for e in events if e["pid"] == pids[name] and e.get("cat") == cat]
for host in ("island 0 / host 0", "island 0 / host 1"):
    assert on(host, "run"), "no launches recorded on " + host
assert len(on("scheduler", "forward")) >= 3, "the scheduler's runs forwarded are missing"
assert len(on(clients[0], "submit")) >= 3, "the client's runs submitted are missing"
starts = {e["id"]: e for e in events if e.get("ph") == "s"}
ends = {e["id"]: e for e in events if e.get("ph") == "f"}
assert starts and set(starts) == set(ends), "transfers between the workers lack their arrows"
assert all(starts[i]["pid"] != ends[i]["pid"] for i in starts), "an arrow within one worker"
# One clock: nothing arrives before it was sent.
assert all(ends[i]["ts"] >= starts[i]["ts"] for i in starts)
PY
r=$(timeout 60 "$bin" sample --cluster "$addr" --checkpoint "$dir/remote" --tokens 10)
[ -n "$r" ] || { echo "no sample from the distributed cluster"; exit 1; }
# Given no --cluster, the cluster `cluster up` runs (said on stderr).
r=$(timeout 60 "$bin" sample --checkpoint "$dir/remote" --tokens 10 2>"$dir/default.err")
[ -n "$r" ] && grep -q "cluster up" "$dir/default.err" || { cat "$dir/default.err"; exit 1; }
kill -INT "$up"
timeout 30 tail --pid="$up" -f /dev/null
up=
echo "train lm CLI: OK"
