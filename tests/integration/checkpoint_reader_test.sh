#!/bin/bash
# scripts/read_checkpoint.py reads what causeway/checkpoint writes, without
# Causeway: the sample checkpoint of checkpoint_format_test, then the same
# with a piece corrupted (refused, naming it).
# Usage: checkpoint_reader_test.sh path/to/checkpoint_format_test path/to/read_checkpoint.py
set -euo pipefail
test_bin=$1
reader=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
CAUSEWAY_CHECKPOINT_SAMPLE="$dir" "$test_bin" --gtest_filter='*WritesASample*' >/dev/null
out=$(/usr/bin/python3 "$reader" "$dir")
echo "$out"
grep -qx "step 7: step-00000007" <<<"$out"
grep -qx "w float32 \[4, 6\] sum=276.0" <<<"$out"
grep -qx "step int32 \[\] sum=7" <<<"$out"
printf '\x7f' | dd of="$dir/step-00000007/w.1" bs=1 seek=3 conv=notrunc status=none
if err=$(/usr/bin/python3 "$reader" "$dir" 2>&1); then
  echo "FAIL: a corrupt piece was read: $err"
  exit 1
fi
grep -q "w.1 does not match its checksum" <<<"$err" || { echo "FAIL: $err"; exit 1; }
# A manifest naming a file outside its folder, or pieces that overlap.
manifest="$dir/step-00000007/manifest.json"
for spoil in 'm["arrays"][0]["pieces"][0]["file"] = "../x"' \
             'm["arrays"][0]["pieces"][1]["offset"] = [1, 0]'; do
  cp "$manifest" "$dir/saved.json"
  /usr/bin/python3 -c "import json,sys; m=json.load(open(sys.argv[1])); $spoil; json.dump(m, open(sys.argv[1], 'w'))" "$manifest"
  if err=$(/usr/bin/python3 "$reader" "$dir" 2>&1); then
    echo "FAIL: read despite $spoil: $err"
    exit 1
  fi
  grep -q "not a plain file name\|overlaps another" <<<"$err" || { echo "FAIL: $spoil: $err"; exit 1; }
  cp "$dir/saved.json" "$manifest"
done
echo "ok"
