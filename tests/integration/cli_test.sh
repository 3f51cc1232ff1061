#!/bin/bash
# The `causeway` command's contract with scripts: --version names the wire
# protocol, no subcommand prints help, --help shows defaults, and exit codes
# are 0 (success), 1 (runtime error), 2 (usage error) for every subcommand.
# Usage: cli_test.sh path/to/causeway
set -uo pipefail
bin=$1
fail=0
expect() {  # expect CODE DESCRIPTION -- COMMAND...
  local want=$1 what=$2
  shift 3
  "$@" >/tmp/cli_test_out.$$ 2>&1
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: exit $got, want $want: $*"
    sed 's/^/  | /' /tmp/cli_test_out.$$ | head -5
    fail=1
  fi
}
trap 'rm -f /tmp/cli_test_out.$$ /tmp/cli_test_help.$$' EXIT

version=$("$bin" --version) || { echo "FAIL: --version exited $?"; fail=1; }
echo "$version" | grep -q "^causeway .* (wire protocol [0-9]\+)$" ||
  { echo "FAIL: --version printed '$version'"; fail=1; }
echo "$version" | grep -q "^BLAS: OpenBLAS .* kernels (" ||
  { echo "FAIL: --version names no BLAS kernels: '$version'"; fail=1; }
"$bin" >/tmp/cli_test_out.$$ 2>&1 || { echo "FAIL: causeway alone exited $?"; fail=1; }
grep -q "SUBCOMMANDS" /tmp/cli_test_out.$$ || grep -qi "subcommands" /tmp/cli_test_out.$$ ||
  { echo "FAIL: causeway alone printed no help"; fail=1; }

# --help on every subcommand: exit 0, and a default shown where there are options.
for sub in demo "train mlp" "train lm" sample coordinator worker "cluster up" "cluster status" \
           "cluster set-weight" "bench dispatch" "bench utilization" "bench pipeline" \
           "bench matmul" "bench lm" "bench tenancy"; do
  # shellcheck disable=SC2086
  expect 0 "$sub --help" -- "$bin" $sub --help
  # shellcheck disable=SC2086
  # (Into a file: grep -q stops reading early, and pipefail would count the
  # writer's SIGPIPE as a failure.)
  # shellcheck disable=SC2086
  "$bin" $sub --help >/tmp/cli_test_help.$$ 2>&1
  grep -q "=[^ ]" /tmp/cli_test_help.$$ || { echo "FAIL: $sub --help shows no defaults"; fail=1; }
done

# Usage errors: 2.
expect 2 "unknown subcommand" -- "$bin" no-such-command
expect 2 "unknown flag" -- "$bin" demo --no-such-flag
expect 2 "value out of range" -- "$bin" demo --steps 0
expect 2 "not a number" -- "$bin" bench dispatch --devices many
expect 2 "missing required flag" -- "$bin" cluster status
expect 2 "flag of the embedded cluster with --cluster" -- \
  "$bin" demo --islands 3 --cluster grpc://127.0.0.1:1
expect 2 "train lm --memory with --cluster" -- \
  "$bin" train lm --data /usr/share/common-licenses/GPL-3 --memory 1000000 --cluster grpc://127.0.0.1:1
expect 2 "--hosts with --cluster" -- "$bin" bench dispatch --hosts 2 --cluster grpc://127.0.0.1:1
expect 2 "the multi-controller baseline with --cluster" -- \
  "$bin" bench dispatch --controller multi --cluster grpc://127.0.0.1:1
expect 2 "utilization of both controllers with --cluster" -- \
  "$bin" bench utilization --controller both --cluster grpc://127.0.0.1:1
expect 2 "pipeline flags without --parallel pipeline" -- \
  "$bin" train lm --data /usr/share/common-licenses/GPL-3 --stages 2
expect 2 "a pipeline of one stage" -- \
  "$bin" train lm --data /usr/share/common-licenses/GPL-3 --parallel pipeline --stages 1
expect 2 "tenancy --hosts with --cluster" -- \
  "$bin" bench tenancy --hosts 2 --cluster grpc://127.0.0.1:1
expect 2 "bad list" -- "$bin" bench tenancy --clients 2 --weights 1
expect 2 "no operator token" -- env -u CAUSEWAY_WORKER_TOKEN \
  "$bin" cluster set-weight --cluster grpc://127.0.0.1:1 --client 0

# GPUs: `causeway gpus` lists those of every GPU kind ("vulkan 0: ...") (exit 0) or says why
# there are none (exit 1); --gpu past them is a usage error naming them.
"$bin" gpus >/tmp/cli_test_out.$$ 2>&1
gpus_rc=$?
if [ "$gpus_rc" -eq 0 ]; then
  grep -q "^[a-z]* 0: .*driver" /tmp/cli_test_out.$$ || { echo "FAIL: gpus printed no GPU 0"; fail=1; }
elif [ "$gpus_rc" -eq 1 ]; then
  grep -q "^error: " /tmp/cli_test_out.$$ || { echo "FAIL: gpus failed without a reason"; fail=1; }
else
  echo "FAIL: gpus exited $gpus_rc"; fail=1
fi
expect 2 "--gpu past this machine's GPUs" -- "$bin" --gpu 99 demo --steps 1
"$bin" demo --gpu 99 --steps 1 >/tmp/cli_test_out.$$ 2>&1
grep -q "GPU" /tmp/cli_test_out.$$ || { echo "FAIL: --gpu 99 did not say why"; fail=1; }

# Runtime errors: 1 (nothing listens on port 1).
expect 1 "unreachable cluster" -- env CAUSEWAY_TOKEN=t \
  "$bin" cluster status --cluster grpc://127.0.0.1:1 --timeout 2
expect 1 "unreachable cluster (demo)" -- env CAUSEWAY_TOKEN=t \
  "$bin" demo --cluster grpc://127.0.0.1:1 --timeout 2 --steps 1
# A refused connection fails at once, naming the address, however long the
# timeout (it once waited all of it). The bound leaves room for a sanitized
# binary's start on a loaded machine (TSan, idle: 1.7 s for the whole command;
# the test once failed under TSan beside the rest of the suite on 2 cores and
# never alone, and this 5 s bound was its only timed check); distributed_test
# holds the connection itself to 1 s.
start=$(date +%s%N)
env CAUSEWAY_TOKEN=t "$bin" cluster status --cluster grpc://127.0.0.1:1 --timeout 30 \
  >/dev/null 2>/tmp/cli_test_out.$$ && { echo "FAIL: a refused connection succeeded"; fail=1; }
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
if [ "$elapsed_ms" -ge 10000 ] || ! grep -q "127.0.0.1:1" /tmp/cli_test_out.$$; then
  echo "FAIL: a refused connection took ${elapsed_ms} ms:"; cat /tmp/cli_test_out.$$; fail=1
fi
expect 1 "unreachable cluster (bench)" -- env CAUSEWAY_TOKEN=t \
  "$bin" bench dispatch --cluster grpc://127.0.0.1:1 --timeout 1
expect 2 "a weight of 0 (the range is open at 0)" -- "$bin" demo --weight 0 --steps 1
expect 2 "an unknown mode in a list" -- "$bin" bench dispatch --mode opbyop,bogus

# bench dispatch --mode takes a list: one report per mode, interleaved runs.
if out=$("$bin" bench dispatch --mode opbyop,fused --devices 1 --computation add \
    --seconds 0.05 --json 2>&1); then
  modes=$(echo "$out" | sed -n 's/.*"mode":"\([a-z]*\)".*/\1/p' | tr '\n' ' ')
  [ "$modes" = "opbyop fused " ] || { echo "FAIL: --mode opbyop,fused reported '$modes'"; fail=1; }
else
  echo "FAIL: bench dispatch --mode opbyop,fused exited $?: $out"; fail=1
fi
# train mlp --log-every: a line every N steps and after the last.
if out=$("$bin" train mlp --devices 1 --steps 7 --log-every 3 2>&1); then
  steps=$(echo "$out" | awk '$1 == "step" {printf "%s ", $2}')
  [ "$steps" = "0 3 6 " ] || { echo "FAIL: train mlp --log-every 3 logged steps '$steps'"; fail=1; }
else
  echo "FAIL: train mlp --log-every exited $?: $out"; fail=1
fi

[ "$fail" -eq 0 ] && echo "cli: every check passed"
exit "$fail"
