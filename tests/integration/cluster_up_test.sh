#!/bin/bash
# `causeway cluster up` starts a multi-process cluster, `causeway demo
# --cluster` runs against it and checks its numbers, and Ctrl-C (SIGINT)
# stops every process. Usage: cluster_up_test.sh path/to/causeway
set -euo pipefail
bin=$1
dir=$(mktemp -d)
mkfifo "$dir/out"
up=
cleanup() {
  [ -n "$up" ] && kill -KILL "$up" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

# The token record goes to a directory of this test's own.
export XDG_RUNTIME_DIR="$dir/run"
mkdir -m 700 "$XDG_RUNTIME_DIR"
unset CAUSEWAY_TOKEN
"$bin" cluster up --islands 2 --hosts-per-island 2 --devices-per-host 2 --metrics-port 0 --json \
  >"$dir/out" 2>"$dir/err" &
up=$!
exec 3<"$dir/out"
if ! read -r -t 60 -u 3 line; then
  echo "cluster up printed nothing"; cat "$dir/err"; exit 1
fi
echo "cluster up: $line"
addr=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["address"])' "$line")
token=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["token"])' "$line")
children=$(pgrep -P "$up" | tr '\n' ' ')
[ "$(echo $children | wc -w)" -eq 5 ] || { echo "expected 5 children, got: $children"; exit 1; }

result=$(CAUSEWAY_TOKEN=$token timeout 120 "$bin" demo --cluster "$addr" --steps 3 --json)
echo "demo: $result"
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["ok"] and r["islands"] == 2 and r["devices_per_island"] == 4, r' "$result"
# Without the token the demo is refused with a clear error.
if CAUSEWAY_TOKEN=wrong timeout 60 "$bin" demo --cluster "$addr" --steps 1 2>"$dir/refused"; then
  echo "demo without the token succeeded"; exit 1
fi
grep -q UNAUTHENTICATED "$dir/refused" || { cat "$dir/refused"; exit 1; }

# The coordinator's Prometheus endpoint: well-formed text, every device
# and host, and counters that move with a run.
metrics=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["metrics"])' "$line")
scrape() {
  python3 - "$metrics" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
sample = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? '
                    r'(-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|NaN|[-+]Inf)$')
values = {}
for line in text.splitlines():
    if line.startswith("# HELP ") or line.startswith("# TYPE "):
        continue
    assert sample.match(line), line
    name, value = line.rsplit(" ", 1)
    values[name] = float(value)
assert values["causeway_devices"] == 8 and values["causeway_hosts"] == 4, values
assert sum(1 for k in values if k.startswith("causeway_host_up{") and values[k] == 1) == 4
caps = [v for k, v in values.items() if k.startswith("causeway_device_memory_capacity_bytes")]
assert len(caps) == 8 and all(c == 1 << 30 for c in caps), caps
launches = [v for k, v in values.items() if k.startswith("causeway_device_launches{")]
busy = [v for k, v in values.items() if k.startswith("causeway_device_busy_seconds{")]
assert len(launches) == 8 and len(busy) == 8, values
# Busy time splits into the device's own computation and time in collectives.
for k, v in values.items():
    if k.startswith("causeway_device_busy_seconds{"):
        labels = k[len("causeway_device_busy_seconds"):]
        own = values["causeway_device_compute_seconds" + labels]
        waits = values["causeway_device_collective_seconds" + labels]
        assert own >= 0 and waits >= 0 and abs(own + waits - v) < 1e-5, (k, v, own, waits)
        assert values["causeway_device_queued_launches" + labels] >= 0
# The demo all-reduces on island 0: its devices' time in collectives comes
# through from the workers.
assert sum(v for k, v in values.items()
           if k.startswith('causeway_device_collective_seconds{island="0"')) > 0
# Transport totals: clients have been sent replies and read from; every host too.
assert values['causeway_transport_bytes_total{peer="clients",direction="sent"}'] > 0
assert values['causeway_transport_bytes_total{peer="clients",direction="received"}'] > 0
assert sum(1 for k in values if k.startswith("causeway_host_send_queue_bytes{")) == 4
print(int(sum(launches)), sum(busy) > 0)
PY
}
# (The demo resets the devices' counters when it starts, then runs on every
# device: they show its launches and busy time.)
CAUSEWAY_TOKEN=$token timeout 120 "$bin" demo --cluster "$addr" --steps 2 --json >/dev/null
read -r launched busy <<<"$(scrape)"
[ "$launched" -gt 0 ] && [ "$busy" = True ] || { echo "metrics after a demo: $launched $busy"; exit 1; }

# cluster status: every device's launches, memory (in use, peak, capacity)
# and busy fraction over a window.
status=$(timeout 60 "$bin" cluster status --cluster "$addr" --interval 0.2 --json)
python3 - "$status" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
devices = [d for i in s["islands"] for h in i["hosts"] for d in h["devices"]]
assert len(devices) == 8, devices
assert s["window_s"] >= 0.2, s["window_s"]
for d in devices:
    assert d["memory_capacity"] > 0 and 0 <= d["memory_in_use"] <= d["memory_capacity"], d
    assert 0.0 <= d["busy_fraction"] <= 1.0 and d["failed"] == 0, d
assert sum(d["launches"] for d in devices) > 0 and max(d["memory_peak"] for d in devices) > 0
PY

# A client on this machine needs no token: cluster up recorded it, private
# to this user.
record=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["token_file"])' "$line")
[ "$(stat -c %a "$record")" = 600 ] || { echo "record mode $(stat -c %a "$record")"; exit 1; }
[ "$(stat -c %a "$XDG_RUNTIME_DIR/causeway")" = 700 ] || { echo "record directory not 0700"; exit 1; }
result=$(timeout 120 "$bin" demo --cluster "$addr" --steps 1 --json)
python3 -c 'import json,sys; assert json.loads(sys.argv[1])["ok"]' "$result"
# Given no --cluster, commands use the one cluster `cluster up` runs.
timeout 60 "$bin" cluster status >/dev/null 2>"$dir/default.err" || { cat "$dir/default.err"; exit 1; }
grep -q "cluster up" "$dir/default.err" || { cat "$dir/default.err"; exit 1; }
# localhost is the same cluster, and finds the same record.
result=$(timeout 120 "$bin" demo --cluster "grpc://localhost:${addr##*:}" --steps 1 --json)
python3 -c 'import json,sys; assert json.loads(sys.argv[1])["ok"]' "$result"
# Open to others, it is refused, naming the file.
chmod 644 "$record"
if timeout 60 "$bin" demo --cluster "$addr" --steps 1 2>"$dir/open"; then
  echo "a record readable by others was used"; exit 1
fi
grep -q "open to other users" "$dir/open" || { cat "$dir/open"; exit 1; }
chmod 600 "$record"

kill -INT "$up"
status=0
timeout 30 tail --pid="$up" -f /dev/null || status=$?
[ "$status" -eq 0 ] || { echo "cluster up did not stop"; exit 1; }
wait "$up" || { echo "cluster up exited with $?"; cat "$dir/err"; exit 1; }
up=
for p in $children; do
  if kill -0 "$p" 2>/dev/null; then echo "process $p outlived the cluster"; exit 1; fi
done
[ ! -e "$record" ] || { echo "the token record outlived the cluster"; exit 1; }
echo "cluster stopped; no process left; token record removed"
