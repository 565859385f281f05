#!/usr/bin/env bash
# DistributedDataParallel across the GPUs of one host: GPT-2 124M (bfloat16 autocast, the
# compiled training step) on 1 GPU and on 2, 4 ... up to every GPU, 16 sequences of 1024 tokens
# per GPU, and, for each size N, one GPU trained on the same global batch (16 N sequences) as
# the loss curve N GPUs must follow. Prints each size's tokens/s, its scaling efficiency
# (tokens/s over N times one GPU's) and its largest loss difference from the one-GPU curve;
# with OUT set, writes them to $OUT/multi-gpu.json. Usage: scripts/test-multi-gpu.sh [steps].
# Needs 2 GPUs or more and MPI (the machine's, or Open MPI's Debian packages from
# scripts/gpu-deps.sh). NVLink multicast stays off.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if (( gpus < 2 )); then
  echo "[test-multi-gpu] $gpus GPU(s) here: this run needs 2 or more" >&2
  exit 2
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WITH_MPI=1 TARGETS=ember-ddp-bench source scripts/gpu-build.sh
bench=./build-gpu/bench/ember-ddp-bench
run() {  # ranks, rows per rank
  # The ranks inherit this environment (one host): NCCL's and cuDNN's library paths among it.
  mpirun --oversubscribe -np "$1" "$bench" --device cuda --model gpt2 --batch "$2" \
    --steps "$steps" | grep '^{'
}
results=$(mktemp)
echo "[test-multi-gpu] 1 GPU, 16 sequences"
run 1 16 >>"$results"
for ((n = 2; n <= gpus; n *= 2)); do
  echo "[test-multi-gpu] $n GPUs, 16 sequences each; 1 GPU on their $((16 * n))"
  run "$n" 16 >>"$results"
  run 1 $((16 * n)) >>"$results"
done
python3 - "$results" "${OUT:-}" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
one = rows[0]
report = {"one_gpu": one, "sizes": []}
print(f"1 GPU: {one['tokens_per_s']:.0f} tokens/s ({one['ms_per_step']:.2f} ms/step)")
for many, ref in zip(rows[1::2], rows[2::2]):
    n = many["world"]
    eff = many["tokens_per_s"] / (n * one["tokens_per_s"])
    diff = max(abs(a - b) for a, b in zip(many["losses"], ref["losses"]))
    report["sizes"].append({"gpus": n, "tokens_per_s": many["tokens_per_s"],
                            "speedup": many["tokens_per_s"] / one["tokens_per_s"],
                            "efficiency": eff, "max_loss_difference": diff,
                            "losses": many["losses"], "one_gpu_losses": ref["losses"]})
    print(f"{n} GPUs: {many['tokens_per_s']:.0f} tokens/s, {many['tokens_per_s'] / one['tokens_per_s']:.2f}x "
          f"one GPU (efficiency {eff:.3f}); loss curve within {diff:.2e} of one GPU's on the same "
          f"global batch (final {many['losses'][-1]:.4f} / {ref['losses'][-1]:.4f})")
if sys.argv[2]:
    json.dump(report, open(sys.argv[2] + "/multi-gpu.json", "w"), indent=1)
PY
