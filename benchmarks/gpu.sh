#!/usr/bin/env bash
# Everything the project measures on a GPU, in one command that fits in about 10 minutes on one GPU:
#   1. the benchmark's rows on the GPU (fp32 and bf16) and GPT-2 124M at 1024 tokens in bf16 (MFU against the
#      bf16 matmul peak the benchmark measures on that device);
#   2. trainer=fsdp (FSDP2, bf16 parameters for compute) trained on every GPU of the machine, its optimizer groups
#      checked from the checkpoint (matrices decay, vectors do not), its full state-dict checkpoint resumed to a
#      later step with FSDP, and that checkpoint evaluated without FSDP.
#
#   bash benchmarks/gpu.sh [output directory]      (default: benchmarks/results/gpu-<date>)
#
# Needs the project installed as the README says and the data directory (ZOO_DATA_DIR) with tiny shakespeare,
# or the built-in copy. Each step has its own time limit; a failed step is reported and the next one still runs,
# and the script exits non-zero if any step failed. Logs and JSON land in the output directory.
set -uo pipefail

out="${1:-benchmarks/results/gpu-$(date +%Y-%m-%d)}"
mkdir -p "$out"
export ZOO_OFFLINE="${ZOO_OFFLINE:-1}"
failed=()

step() {  # step <name> <seconds> <command...>: run with a time limit, log to $out/<name>.log
    local name="$1" limit="$2"
    shift 2
    echo "== $name (limit ${limit}s): $*"
    local start=$SECONDS
    if timeout --signal=TERM --kill-after=20 "$limit" "$@" >"$out/$name.log" 2>&1; then
        echo "   ok in $((SECONDS - start)) s"
    else
        local rc=$?
        echo "   FAILED (exit $rc after $((SECONDS - start)) s); last lines of $out/$name.log:"
        tail -n 15 "$out/$name.log" | sed 's/^/   | /'
        failed+=("$name")
    fi
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/device.txt" 2>&1 || true
python -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" >>"$out/device.txt" 2>&1 || true
cat "$out/device.txt"

# 1. Benchmark rows. --no-compile keeps it inside the budget; the compiled rows are a separate, longer run.
step bench 240 python -m benchmarks.run --device cuda --dtypes fp32,bf16 --no-compile --json "$out/bench.json"
step bench_gpt2 150 python -m benchmarks.run --device cuda --configs gpt2 --dtypes bf16 --no-compile \
    --json "$out/bench_gpt2.json"

# 2. FSDP2 on all GPUs: train, check the optimizer groups, resume from the full state-dict checkpoint, evaluate it
#    without FSDP.
runs="$out/fsdp_runs"
common=(experiment=gpt_shakespeare_char trainer=fsdp logger=csv "paths.log_dir=$runs"
    trainer.val_check_interval=50 trainer.limit_val_batches=5)
step fsdp_train 150 python train.py "${common[@]}" trainer.max_steps=100
first_ckpt="$(ls -t "$runs"/*/runs/*/checkpoints/last.ckpt 2>/dev/null | head -n 1)"
if [ -n "$first_ckpt" ]; then
    step fsdp_groups 60 python -m benchmarks.optimizer_groups "$first_ckpt"
fi
step fsdp_resume 150 python train.py "${common[@]}" trainer.max_steps=150 ckpt_path=last
last_ckpt="$(ls -t "$runs"/*/runs/*/checkpoints/last.ckpt 2>/dev/null | head -n 1)"
if [ -n "$last_ckpt" ]; then
    step fsdp_eval 90 python eval.py "ckpt_path=$last_ckpt" trainer=gpu
else
    echo "== fsdp_eval: no last.ckpt under $runs"
    failed+=(fsdp_eval)
fi

if [ ${#failed[@]} -gt 0 ]; then
    echo "failed steps: ${failed[*]} (logs in $out)"
    exit 1
fi
echo "all steps passed; results in $out"
