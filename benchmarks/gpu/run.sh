#!/usr/bin/env bash
# Run the GPU measurements on a lent GPU machine, from the repository root there.
#
# Three device calls, each made as soon as the previous one returns (the machine stays warm for
# about 30 s and keeps /tmp meanwhile); benchmarks/gpu/prepare.sh made .gpu/ here first:
#
#   bash benchmarks/gpu/run.sh part1      carry: .gpu/part1, .gpu/whl (keeps part 1 of the model,
#                                         installs the wheels into /tmp/site and checks the imports)
#   bash benchmarks/gpu/run.sh part2      carry: .gpu/part2
#   bash benchmarks/gpu/run.sh main       carry: .gpu/part3, .gpu/whl (timeout_s 600)
#
# `main` joins and checks the model, installs the wheels into /tmp/site (this package runs from src/),
# converts the model once into $SEARCHENV_CACHE, then runs what WHAT names, in this order:
#   trl       benchmarks/trl_grpo.py: TRL's GRPOTrainer through rollout_func from the packaged SFT
#             adapter (issue 30; about 4 minutes, training capped by TRL_BUDGET seconds)
#   decode    benchmarks/gpu_decode.py: both decode loops and transformers' generate at 128 rows
#   learning  benchmarks/learning.py with issue 29's recipe (2,000 oracle demonstrations, SFT then
#             GRPO, 200 held-out synthetic-2hop questions, the heuristic beside them); LORA=1 runs
#             it with LoRA adapters and brings back searcher.tar (the packaged searcher's adapters)
# and copies the result files into $OUT (at most 8 files come back). Default WHAT="trl decode".
#
# Here, without a GPU, a smoke run checks the script's logic on tiny settings:
#   DEVICE=cpu QUICK=1 SKIP_INSTALL=1 OUT=/tmp/gpu-smoke WHAT="trl decode learning" bash benchmarks/gpu/run.sh main
set -euo pipefail
STAGE=${STAGE:-/tmp/searchenv-gpu}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
LORA=${LORA:-0}
WHAT=${WHAT:-trl decode}
TRL_BUDGET=${TRL_BUDGET:-210}
OUT=${OUT:?set OUT: the folder whose files come back}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$STAGE" "$OUT"

install() {
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
}
case "${1:-}" in
  part1|part2)
    cp ".gpu/$1/model.gguf.part" "$STAGE/$1"
    ls -l "$STAGE"
    if [ "$1" = part1 ]; then
      install
      PYTHONPATH=/tmp/site:$PWD/src "$PY" -c "
import importlib.metadata as m, torch, datasets, trl, gymnasium, bm25s, agents.integrations.trl
print({p: m.version(p) for p in ('torch', 'transformers', 'trl', 'datasets', 'pyarrow', 'fsspec', 'huggingface_hub', 'accelerate', 'peft')})
print('cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
    fi
    exit 0
    ;;
  main) ;;
  *) echo "usage: run.sh part1|part2|main" >&2; exit 2 ;;
esac

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  cp .gpu/part3/model.gguf.part "$STAGE/part3"
  cat "$STAGE/part1" "$STAGE/part2" "$STAGE/part3" > "$STAGE/SmolLM2-135M-Instruct.gguf"
  echo "$(cat .gpu/part3/model.gguf.sha256)  $STAGE/SmolLM2-135M-Instruct.gguf" | sha256sum -c -
  install
  export PYTHONPATH=/tmp/site:$PWD/src
  export SEARCHENV_CACHE=${SEARCHENV_CACHE:-/tmp/searchenv-cache}
  "$PY" -c "
from agents.policies.hf import convert_gguf, model_cache_dir
target = model_cache_dir('SmolLM2-135M-Instruct')
print(target if (target / 'config.json').is_file() else convert_gguf('$STAGE/SmolLM2-135M-Instruct.gguf', target))"
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
fi
uptime > "$OUT/load.txt"

has() { case " $WHAT " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# (0) TRL's GRPOTrainer through rollout_func, from the packaged SFT adapter (issue 30).
if has trl; then
  if [ "$QUICK" = 1 ]; then
    TRL_NAME=trl_grpo_smoke
    TRL_ARGS=(--steps 2 --questions 2 --group 2 --n-dev 4 --window 1 --max-new-tokens 32 --threads 1)
  else
    TRL_NAME=trl_grpo_gpu
    TRL_ARGS=(--threads 8 --time-budget "$TRL_BUDGET" ${TRL_EXTRA:-})
  fi
  # a failure here still lets the next measurements run; its log comes back
  "$PY" benchmarks/trl_grpo.py --device "$DEVICE" "${TRL_ARGS[@]}" --name "$TRL_NAME" || echo "trl_grpo.py failed: exit $?"
  cp benchmarks/results/"$TRL_NAME".* "$OUT"/ 2>/dev/null || true
fi

# (1) decoding speed: both loops and transformers' generate, same prompts, one process (not with LORA=1,
# whose call brings back the adapters instead: at most 8 files come back).
if ! has decode || [ "$LORA" = 1 ]; then
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
if has learning; then
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
fi
uptime >> "$OUT/load.txt"
ls -l "$OUT"
