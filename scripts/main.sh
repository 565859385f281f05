#!/usr/bin/env bash
# The main job: installs what is missing, builds, trains a small GPT on the shipped
# Shakespeare text (nanoGPT's CPU recipe, shortened unless ITERS is set) with the training step
# compiled, then samples from it; the loss curve is drawn in $OUT/loss.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
ITERS=${ITERS:-2000}
OUT=${OUT:-out-shakespeare-char}
COMPILE=${COMPILE:-true}  # COMPILE=false trains eagerly throughout
start=$SECONDS
# Compiled (the first 20 iterations eager, so both speeds are printed), as nanoGPT compiles.
./build/apps/ember-gpt train --out_dir "$OUT" --block_size 64 --batch_size 12 --n_layer 4 \
  --n_head 4 --n_embd 128 --max_iters "$ITERS" --lr_decay_iters "$ITERS" --dropout 0 \
  --eval_iters 20 --eval_interval 250 --log_interval 50 --compile "$COMPILE" \
  --eager_probe_iters 20
./build/apps/ember-gpt sample --out_dir "$OUT" --num_samples 2 --max_new_tokens 400
echo "loss curve: $OUT/loss.svg (train and val loss; open it in a browser)"
echo "main job: training and sampling took $((SECONDS - start)) s"
