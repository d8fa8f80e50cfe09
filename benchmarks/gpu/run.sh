#!/usr/bin/env bash
# Run the GPU measurements of issue 29 on a lent GPU machine, from the repository root there.
#
# Three device calls, each made as soon as the previous one returns (the machine stays warm for
# about 30 s and keeps /tmp meanwhile); benchmarks/gpu/prepare.sh made .gpu/ here first:
#
#   bash benchmarks/gpu/run.sh part1      carry: .gpu/part1           (keeps part 1 of the model)
#   bash benchmarks/gpu/run.sh part2      carry: .gpu/part2
#   bash benchmarks/gpu/run.sh main       carry: .gpu/part3, .gpu/whl (about 9 minutes; timeout_s 600)
#
# `main` joins and checks the model, installs the wheels into /tmp/site (this package runs from src/),
# converts the model once
# into $SEARCHENV_CACHE, then runs (1) benchmarks/gpu_decode.py (both decode loops and transformers'
# generate at 128 rows) and (2) benchmarks/learning.py with the recipe (2,000 oracle
# demonstrations, SFT then GRPO, 200 held-out synthetic-2hop questions, the heuristic beside them),
# and copies the result files into $OUT. LORA=1 runs the learning recipe with LoRA adapters instead
# (for the packaged searcher: compare its row with the full fine-tuning one).
#
# Here, without a GPU, a smoke run checks the script's logic on tiny settings:
#   DEVICE=cpu QUICK=1 SKIP_INSTALL=1 OUT=/tmp/gpu-smoke bash benchmarks/gpu/run.sh main
set -euo pipefail
STAGE=${STAGE:-/tmp/searchenv-gpu}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
LORA=${LORA:-0}
OUT=${OUT:?set OUT: the folder whose files come back}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$STAGE" "$OUT"

case "${1:-}" in
  part1|part2)
    cp ".gpu/$1/model.gguf.part" "$STAGE/$1"
    ls -l "$STAGE"
    exit 0
    ;;
  main) ;;
  *) echo "usage: run.sh part1|part2|main" >&2; exit 2 ;;
esac

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  cp .gpu/part3/model.gguf.part "$STAGE/part3"
  cat "$STAGE/part1" "$STAGE/part2" "$STAGE/part3" > "$STAGE/SmolLM2-135M-Instruct.gguf"
  echo "$(cat .gpu/part3/model.gguf.sha256)  $STAGE/SmolLM2-135M-Instruct.gguf" | sha256sum -c -
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD/src
  export SEARCHENV_CACHE=${SEARCHENV_CACHE:-/tmp/searchenv-cache}
  "$PY" -c "
from agents.policies.hf import convert_gguf, model_cache_dir
target = model_cache_dir('SmolLM2-135M-Instruct')
print(target if (target / 'config.json').is_file() else convert_gguf('$STAGE/SmolLM2-135M-Instruct.gguf', target))"
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
fi
uptime > "$OUT/load.txt"

# (1) decoding speed: both loops and transformers' generate, same prompts, one process (not with LORA=1,
# whose call brings back the adapters instead: at most 8 files come back).
if [ "$LORA" = 1 ]; then
  :
elif [ "$QUICK" = 1 ]; then
  "$PY" benchmarks/gpu_decode.py --device "$DEVICE" --rows 4 --max-new-tokens 8 --repeats 1 --threads 1 \
    --first-turns-only --name gpu_decode_smoke
  cp benchmarks/results/gpu_decode_smoke.* "$OUT"/
else
  "$PY" benchmarks/gpu_decode.py --device "$DEVICE" --rows 128
  cp benchmarks/results/gpu_decode.json benchmarks/results/gpu_decode.md "$OUT"/
fi

# (2) the learning recipe: SFT then GRPO beside the heuristic, on the same held-out questions.
NAME=learning_2hop_gpu
ARGS=(--task synthetic-2hop --device "$DEVICE" --top-k 3 --max-turns 3 --max-doc-chars 450 --max-new-tokens 80
      --phases baselines,sft,grpo_outcome --baselines heuristic --threads 8 --save-every 1000)
if [ "$LORA" = 1 ]; then
  NAME=learning_2hop_gpu_lora
  ARGS+=(--lora --lora-r 16 --export-searcher)
fi
if [ "$QUICK" = 1 ]; then
  NAME=${NAME}_smoke
  ARGS+=(--n-dev 4 --sft-demos 8 --sft-steps 2 --sft-batch 4 --grpo-steps 1 --grpo-batch 2 --grpo-group 2 --threads 1)
else
  ARGS+=(--n-dev 200 --sft-demos 2000 --sft-steps 180 --sft-batch 32 --sft-lr 5e-5
         --grpo-steps 16 --grpo-batch 16 --grpo-group 8 --grpo-lr 2e-6)
fi
"$PY" benchmarks/learning.py "${ARGS[@]}" --name "$NAME" --out "/tmp/runs/$NAME"
cp "benchmarks/results/$NAME".* "$OUT"/ 2>/dev/null || true
for f in benchmarks/results/"$NAME"*_curve*.png; do [ -f "$f" ] && cp "$f" "$OUT"/; done
if [ "$LORA" = 1 ] && [ "$QUICK" != 1 ]; then
  tar -C src/agents/data -cf "$OUT/searcher.tar" searcher   # the LoRA adapters, a few MB
fi
uptime >> "$OUT/load.txt"
ls -l "$OUT"
