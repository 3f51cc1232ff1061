#!/bin/bash
# Honest exits from the `causeway` command on hostile or mistaken input:
# output that cannot be written is exit 1, a command line that is wrong is
# exit 2 (before anything starts), input files are bounded and checked to be
# regular files, and a checkpoint holding NaN or Inf is refused on load.
# Each case prints one line on stderr naming the problem.
# Usage: cli_exits_test.sh path/to/causeway
set -euo pipefail
bin=$1
text=/usr/share/common-licenses/GPL-3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
tiny=(--layers 1 --heads 2 --context 16 --batch 4 --eval-batches 2 --embed 16)

# Runs "$@"; the exit must be $1 and stderr must hold $2.
expect_exit() {
  local code=$1 want=$2; shift 2
  local rc=0
  "$@" >"$dir/out" 2>"$dir/err" || rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -q -- "$want" "$dir/err"; then
    echo "for: $*"; echo "expected exit $code and '$want', got $rc:"; cat "$dir/err"; exit 1
  fi
  echo "exit $rc as expected: $(grep -m1 -- "$want" "$dir/err")"
}

# A failed write to stdout is a failed command.
if [ -w /dev/full ]; then
  rc=0
  "$bin" demo --json >/dev/full 2>"$dir/err" || rc=$?
  [ "$rc" -eq 1 ] && grep -q "could not write the output" "$dir/err" ||
    { echo "demo --json >/dev/full exited $rc:"; cat "$dir/err"; exit 1; }
  rc=0
  "$bin" train lm --data "$text" "${tiny[@]}" --iters 2 --eval-every 0 >/dev/full \
    2>"$dir/err" || rc=$?
  [ "$rc" -eq 1 ] && grep -q "could not write the output" "$dir/err" ||
    { echo "train lm >/dev/full exited $rc:"; cat "$dir/err"; exit 1; }
  rc=0
  "$bin" --help >/dev/full 2>"$dir/err" || rc=$?
  [ "$rc" -eq 1 ] || { echo "--help >/dev/full exited $rc"; exit 1; }
fi

# Command-line errors exit 2, found before any data is read or any
# connection is tried.
expect_exit 2 "does not divide into 5 heads" \
  "$bin" train lm --data /dev/zero --layers 1 --heads 5 --embed 64 --iters 1
expect_exit 2 "--checkpoint" "$bin" train lm --data "$text" "${tiny[@]}" --resume
# Settings are checked once, at start: a value a CAUSEWAY_* variable does
# not take is a usage error naming the variable and its values.
expect_exit 2 "CAUSEWAY_VULKAN_KERNELS=nonsense is not one of auto, gpu" \
  env CAUSEWAY_VULKAN_KERNELS=nonsense "$bin" demo --steps 1
expect_exit 2 "CAUSEWAY_VULKAN_COLLECTIVES=bogus is not one of auto, gpu, host" \
  env CAUSEWAY_VULKAN_COLLECTIVES=bogus "$bin" gpus
expect_exit 2 "CAUSEWAY_VULKAN_STAGING=maybe is not one of 0, 1" \
  env CAUSEWAY_VULKAN_STAGING=maybe "$bin" demo --steps 1
expect_exit 2 "CAUSEWAY_CUDA_GPU=x is not an index" env CAUSEWAY_CUDA_GPU=x "$bin" gpus
rc=0
env CAUSEWAY_VULKAN_KERNLES=gpu "$bin" --version >/dev/null 2>"$dir/err" || rc=$?
[ "$rc" -eq 0 ] && grep -q "CAUSEWAY_VULKAN_KERNLES is not a Causeway setting" "$dir/err" ||
  { echo "a misspelt setting: exit $rc, no warning:"; cat "$dir/err"; exit 1; }
# A checkpoint folder that cannot be written fails before the first step
# (it failed at the first save, after training), even for root (/proc).
rc=0
"$bin" train lm --data "$text" "${tiny[@]}" --iters 3 --eval-every 0 --checkpoint /proc/cw-ckpt \
  --checkpoint-every 2 >"$dir/out" 2>"$dir/err" || rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "cannot be" "$dir/err" || grep -q "^iter" "$dir/out"; then
  echo "unwritable --checkpoint: exit $rc:"; cat "$dir/out" "$dir/err"; exit 1
fi
expect_exit 2 "is not AXIS=N" "$bin" train lm --data "$text" "${tiny[@]}" --mesh garbage
expect_exit 2 "is not AXIS=N" "$bin" train lm --data "$text" "${tiny[@]}" --mesh data=0
expect_exit 2 "unknown axis" "$bin" train lm --data "$text" "${tiny[@]}" --mesh pipe=2
# --elastic recovers a distributed cluster's run from its checkpoints.
expect_exit 2 "give --cluster grpc://" "$bin" train lm --data "$text" "${tiny[@]}" --elastic \
  --cluster local --checkpoint "$dir/e" --checkpoint-every 5
expect_exit 2 "give --checkpoint DIR and --checkpoint-every" \
  "$bin" train lm --data "$text" "${tiny[@]}" --elastic --cluster grpc://127.0.0.1:1
expect_exit 2 "not with --parallel pipeline" "$bin" train lm --data "$text" "${tiny[@]}" \
  --elastic --cluster grpc://127.0.0.1:1 --checkpoint "$dir/e" --checkpoint-every 5 \
  --parallel pipeline --stages 2
expect_exit 2 "not a cluster address" "$bin" demo --cluster http://example.com:80
expect_exit 2 "IPv6 address goes in brackets" timeout 10 "$bin" demo --cluster 'grpc://[::1'
expect_exit 2 "not a cluster address" timeout 10 "$bin" cluster status --cluster local
expect_exit 2 "must be above 0" \
  "$bin" cluster set-weight --cluster grpc://127.0.0.1:1 --client 1 --weight 0
expect_exit 2 "must be above 0" "$bin" demo --weight 0

# The coordinator's metrics listener: a malformed address exits 2 at
# parse, one not of this machine exits 2, one in use exits 1 naming the
# cause; none aborts. `cluster up` says why its coordinator did not start
# and keeps the logs.
export CAUSEWAY_TOKEN=client-token CAUSEWAY_WORKER_TOKEN=worker-token
expect_exit 2 "not HOST:PORT" timeout 20 "$bin" coordinator --listen 127.0.0.1:0 --metrics garbage
expect_exit 2 "not HOST:PORT" timeout 20 "$bin" coordinator --listen 127.0.0.1:0 \
  --metrics 127.0.0.1:99999
expect_exit 2 "Cannot assign requested address" timeout 20 "$bin" coordinator \
  --listen 127.0.0.1:0 --metrics 192.0.2.1:9100
python3 - "$bin" <<'PY'
import os, socket, subprocess, sys
bin = sys.argv[1]
taken = socket.socket()
taken.bind(("127.0.0.1", 0))
taken.listen()
port = taken.getsockname()[1]
r = subprocess.run([bin, "coordinator", "--listen", "127.0.0.1:0", "--metrics",
                    f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=20)
assert r.returncode == 1 and "Address already in use" in r.stderr, (r.returncode, r.stderr)
r = subprocess.run([bin, "cluster", "up", "--metrics-port", str(port)], capture_output=True,
                   text=True, timeout=60)
assert r.returncode == 1, (r.returncode, r.stderr)
assert "exited before it was serving" in r.stderr and "Address already in use" in r.stderr, r.stderr
kept = r.stderr.split("logs are kept in ")[1].split(")")[0]
assert os.path.isfile(os.path.join(kept, "coordinator.log")), kept
subprocess.run(["rm", "-rf", kept])
print("metrics listener in use: exit 1 with the cause, logs kept")
PY
unset CAUSEWAY_TOKEN CAUSEWAY_WORKER_TOKEN

# Sizes past this machine's memory are refused before anything is
# allocated (no machine holds these: 784 GiB and 388 GiB).
expect_exit 1 "needs about 784.0 GiB of host memory" timeout 60 \
  "$bin" bench collective --bytes 4G --devices 64
expect_exit 1 "holding the demo's arrays" timeout 60 "$bin" demo --features 16384 \
  --hidden 16384 --rows-per-device 65536 --devices-per-host 4 --memory 1000000000000 --steps 1

# Input files: a directory, a device, a file past the bound.
expect_exit 1 "is a directory" "$bin" train lm --data "$dir" "${tiny[@]}"
expect_exit 1 "not a regular file" timeout 10 "$bin" train lm --data /dev/zero --tokenizer bytes \
  "${tiny[@]}"
mkfifo "$dir/fifo"
expect_exit 1 "not a regular file" timeout 10 "$bin" train lm --data "$dir/fifo" "${tiny[@]}"
truncate -s $(((1 << 30) + 1)) "$dir/huge.txt"
expect_exit 1 "larger than 1024 MiB" timeout 60 "$bin" train lm --data "$dir/huge.txt" \
  --tokenizer bytes "${tiny[@]}"

# A checkpoint whose run diverged: refused when sampled or resumed, naming
# the tensor, never printed as text.
"$bin" train lm --data "$text" "${tiny[@]}" --iters 2 --eval-every 0 --log-every 0 \
  --checkpoint "$dir/ck" --checkpoint-format file >/dev/null
python3 - "$dir/ck/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    begin = header["lm_head"]["data_offsets"][0] if "lm_head" in header else \
        min(v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")
    f.seek(8 + n + begin)
    f.write(struct.pack("<f", float("nan")))
PY
expect_exit 1 "holds nan" "$bin" sample --checkpoint "$dir/ck" --tokens 5
expect_exit 1 "holds nan" "$bin" train lm --data "$text" "${tiny[@]}" --iters 4 \
  --checkpoint "$dir/ck" --resume
# The same in a sharded checkpoint whose checksum was made to match: the
# values are still checked. With the checksum left alone, the file is
# named as corrupt.
"$bin" train lm --data "$text" "${tiny[@]}" --iters 2 --eval-every 0 --log-every 0 \
  --checkpoint "$dir/sharded" --checkpoint-format sharded >/dev/null
step="$dir/sharded/step-00000002"
python3 - "$step" <<'PY'
import json, struct, sys, zlib
folder = sys.argv[1]
manifest = json.load(open(folder + "/manifest.json"))
piece = next(a for a in manifest["arrays"] if a["name"].startswith("param/"))["pieces"][0]
data = bytearray(open(folder + "/" + piece["file"], "rb").read())
data[0:4] = struct.pack("<f", float("nan"))
open(folder + "/" + piece["file"], "wb").write(bytes(data))
open(folder + "/corrupt-only", "w").write(piece["file"])
piece["crc32"] = zlib.crc32(bytes(data))
json.dump(manifest, open(folder + "/manifest.json", "w"))
PY
expect_exit 1 "holds nan" "$bin" sample --checkpoint "$dir/sharded" --tokens 5
python3 - "$step" <<'PY'
import json, sys
folder = sys.argv[1]
manifest = json.load(open(folder + "/manifest.json"))
for a in manifest["arrays"]:
    for p in a["pieces"]:
        if p["file"] == open(folder + "/corrupt-only").read():
            p["crc32"] ^= 1
json.dump(manifest, open(folder + "/manifest.json", "w"))
PY
expect_exit 1 "does not match its checksum" "$bin" sample --checkpoint "$dir/sharded" --tokens 5
echo "all exits as expected"
