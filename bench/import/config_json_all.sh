#!/bin/bash
# The JSON (or refusal) of one build on every tests/models/hf_configs config: estimate --graph train (bf16
# training and pytorch inference at seq 512, onnxruntime inference at seq 128), estimate --graph decode and
# --graph prefill, serve --graph decode on an H100 at 4,096. Run it for two builds and `diff -r` the folders.
#   bench/import/config_json_all.sh BUILD/memplan OUTDIR
set -u
BIN=$1; OUT=$2; mkdir -p "$OUT"
C=$(dirname "$0")/../../tests/models/hf_configs
for f in "$C"/*.json; do
  n=$(basename "$f" .json)
  "$BIN" estimate "$f" --graph train --batch 1 --dim seq=512 --mode train --precision bf16 --json > "$OUT/$n.train.json" 2>&1
  "$BIN" estimate "$f" --graph train --batch 1 --dim seq=512 --mode inference --json > "$OUT/$n.inf.json" 2>&1
  "$BIN" estimate "$f" --graph train --batch 1 --dim seq=128 --mode inference --runtime onnxruntime --json > "$OUT/$n.inf_ort.json" 2>&1
  "$BIN" estimate "$f" --graph decode --batch 2 --dim past_sequence_length=64 --dim sequence_length=1 \
    --dim total_sequence_length=65 --json > "$OUT/$n.decode.json" 2>&1
  "$BIN" estimate "$f" --graph prefill --batch 1 --dim sequence_length=256 --dim total_sequence_length=256 \
    --json > "$OUT/$n.prefill.json" 2>&1
  "$BIN" serve "$f" --graph decode --gpu H100-80GB --context 4096 --json > "$OUT/$n.serve.json" 2>&1
done
