#!/bin/bash
# A token is bytes, checked once: a token with a byte gRPC metadata cannot
# carry (a Windows line ending, a newline inside, a tab, non-ASCII) is
# refused at start by the CLI, a coordinator and a worker, with a message
# naming the variable it came from, and never aborts a process in gRPC's
# metadata check. One trailing newline is trimmed (a token file read with
# $(< file) keeps none, but `cat file; echo` or a file read whole does).
# Usage: token_test.sh path/to/causeway
set -uo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

# Runs "$@" under a bound; it must exit 1 or 2 (not a signal, not a hang)
# and say $1 on stderr.
refused() {
  local want=$1; shift
  local rc=0
  timeout 20 "$@" >"$dir/out" 2>"$dir/err" || rc=$?
  if [ "$rc" -ne 1 ] && [ "$rc" -ne 2 ] || ! grep -q -- "$want" "$dir/err"; then
    echo "FAIL for: $*"; echo "expected exit 1 or 2 and '$want', got $rc:"; cat "$dir/err"; fail=1
    return
  fi
  echo "exit $rc as expected: $(grep -m1 -- "$want" "$dir/err")"
}

for bad in $'tok\r' $'to\nk' $'tok\tx' $'t\xc3\xa9k'; do
  refused "CAUSEWAY_TOKEN" env CAUSEWAY_TOKEN="$bad" \
    "$bin" cluster status --cluster grpc://127.0.0.1:1 --timeout 2
  refused "CAUSEWAY_TOKEN" env CAUSEWAY_TOKEN="$bad" \
    "$bin" demo --cluster grpc://127.0.0.1:1 --timeout 2 --steps 1
  refused "CAUSEWAY_TOKEN" env -u CAUSEWAY_WORKER_TOKEN CAUSEWAY_TOKEN="$bad" \
    "$bin" coordinator --listen 127.0.0.1:0
  refused "CAUSEWAY_WORKER_TOKEN" env CAUSEWAY_TOKEN=good CAUSEWAY_WORKER_TOKEN="$bad" \
    "$bin" coordinator --listen 127.0.0.1:0
  refused "CAUSEWAY_WORKER_TOKEN" env CAUSEWAY_WORKER_TOKEN="$bad" \
    "$bin" worker --coordinator 127.0.0.1:1
done
# The message names where the token came from and where the byte is, not
# the token.
env CAUSEWAY_TOKEN=$'secret\r' "$bin" cluster status --cluster grpc://127.0.0.1:1 --timeout 2 \
  2>"$dir/err" >/dev/null
if grep -q secret "$dir/err"; then echo "FAIL: the error shows the token"; fail=1; fi
grep -q "byte 0x0d at position 6" "$dir/err" || { echo "FAIL: no position"; cat "$dir/err"; fail=1; }

# One trailing newline is not an error: the connection is tried (and
# refused, nothing listens on port 1), with no word about the token.
env CAUSEWAY_TOKEN=$'tok\n' "$bin" cluster status --cluster grpc://127.0.0.1:1 --timeout 2 \
  >/dev/null 2>"$dir/err"
if grep -q "token" "$dir/err"; then echo "FAIL: a trailing newline was refused:"; cat "$dir/err"; fail=1; fi

[ "$fail" -eq 0 ] && echo "token_test: all cases held"
exit "$fail"
