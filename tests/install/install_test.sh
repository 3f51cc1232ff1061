#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR [PYTHON_DIR]: see CMakeLists.txt beside it.
set -euo pipefail
build="$1"
src="$2"
python_dir="${3:-}"
work="$(mktemp -d)"
cluster_pid=""
cleanup() {
  if [[ -n "$cluster_pid" ]]; then
    kill -INT "$cluster_pid" 2>/dev/null || true
    wait "$cluster_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
test -f "$work/prefix/lib/cmake/causeway/causewayConfig.cmake"
test -f "$work/prefix/lib/cmake/causeway/causewayConfigVersion.cmake"
test -f "$work/prefix/include/causeway/client/client.h"
test -x "$work/prefix/bin/causeway"
# Internal headers that no public header includes are not installed: the
# public headers (client, mesh, function builder, clusters, models) pull in
# no worker, scheduler, store, resource manager, backend or transport
# internals.
if [[ -e "$work/prefix/include/causeway/cluster/coordinator_server.h" ]]; then
  echo "install_test: an internal header was installed" >&2
  exit 1
fi
internal=$(cd "$work/prefix/include" && find causeway -name '*.h' | grep -E \
  '^causeway/(worker|scheduler|store|resource|backend/cpu|transport/inproc)/|^causeway/transport/grpc/(grpc_common|listener|wire_codec|cluster_codec)\.h$' || true)
if [[ -n "$internal" ]]; then
  echo "install_test: the public headers pull in internal ones:" $internal >&2
  exit 1
fi

# The Python package, from the prefix alone.
if [[ -n "$python_dir" ]]; then
  [[ "$python_dir" = /* ]] || python_dir="$work/prefix/$python_dir"
  (cd "$work" && PYTHONPATH="$python_dir" /usr/bin/python3 -c '
import numpy as np, causeway as cw, sys
assert cw.__file__.startswith(sys.argv[1]), cw.__file__
cw.local_cluster(islands=1, hosts_per_island=1, devices_per_host=2)
x = cw.device_put(np.arange(4, dtype=np.float32), cw.NamedSharding(cw.make_mesh({"d": 2}), cw.P("d")))
assert float(x.sum()) == 6.0
' "$python_dir") || { echo "install_test: the installed Python package failed" >&2; exit 1; }
fi

# A fresh project: nothing of the build tree on its paths.
cmake -S "$src/examples" -B "$work/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" \
  || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/examples" -j 2 >"$work/build.log" || { cat "$work/build.log"; exit 1; }
if grep -q "$build" "$work/examples/build.ninja"; then
  echo "install_test: the external build refers to the build tree" >&2
  exit 1
fi
"$work/examples/quickstart"
"$work/examples/readme_example"

# The distributed example against a cluster of the installed command.
coproc CLUSTER { exec "$work/prefix/bin/causeway" cluster up --islands 1 --hosts-per-island 2 \
  --devices-per-host 2 --json; }
cluster_pid=$CLUSTER_PID
if ! read -r -t 120 line <&"${CLUSTER[0]}"; then
  echo "install_test: cluster up printed no address" >&2
  exit 1
fi
address="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["address"])' "$line")"
token="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["token"])' "$line")"
"$work/examples/remote_sum" "$address" "$token"
echo "install_test: OK"
