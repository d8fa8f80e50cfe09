#!/usr/bin/env bash
# Run the GPU measurements on a lent GPU machine, from the repository root there.
#
# Device calls, each made as soon as the previous one returns (the machine stays warm for about
# 30 s and keeps /tmp meanwhile); benchmarks/gpu/prepare.sh made .gpu/ here first:
#
#   bash benchmarks/gpu/run.sh part1      carry: .gpu/part1, .gpu/whl (keeps part 1 of the model,
#                                         installs the wheels into /tmp/site and checks the imports)
#   bash benchmarks/gpu/run.sh partK      carry: .gpu/partK, for K = 2 .. N-1 (N: .gpu/parts)
#   bash benchmarks/gpu/run.sh main       carry: .gpu/partN, .gpu/parts, .gpu/whl
#   bash benchmarks/gpu/run.sh more       a later call on the same warm machine (nothing staged again)
#
# `main` joins and checks the model, installs the wheels into /tmp/site (this package runs from src/),
# converts the model once into $SEARCHENV_CACHE, then runs what WHAT names, in this order:
#   trl       benchmarks/trl_grpo.py: TRL's GRPOTrainer through rollout_func from the packaged SFT
#             adapter (issue 30; about 4 minutes, training capped by TRL_BUDGET seconds)
#   decode    benchmarks/gpu_decode.py: both decode loops and transformers' generate at 128 rows
#   dtype     benchmarks/searcher_cpu.py --device cuda: the searcher's EM, bfloat16 copy (the default) vs float32
#   learning  benchmarks/learning.py, issue 29's SFT (2,000 oracle demonstrations, all weights) beside
#             the heuristic on 200 held-out synthetic-2hop questions, and the shipped form: its weight
#             change compressed to adapters (RANKS), evaluated as loaded by load_searcher; exported to
#             $SEARCHER. LORA=1 trains LoRA adapters instead.
#   grpo      GRPO from that SFT (GRPO_STEPS), and its shipped form; exports the better shipped form
#   trl-new   benchmarks/trl_grpo.py from the SFT adapter of the searcher exported to $SEARCHER
#   mixed     benchmarks/cpu_mixed.py on the GPU: every layer, MIXED_MINUTES of SFT, then every task against the heuristic
#   claims    benchmarks/claims.py: five seeds of every claim it runs, CLAIMS_MINUTES a call (resumable)
#   mmoa      benchmarks/mmoa_rag.py, issue 44's comparison: the mmoa-heuristic pipeline, the SFT warm start,
#             MAPPO over every role and over one role at a time (the others frozen) on 200 held-out
#             synthetic-2hop questions; MMOA_PHASES picks the phases of this call (cached in /tmp/runs, so
#             a `more` call continues where the last stopped)
# and brings back results.tar and searcher.tar.part-* (see benchmarks/gpu/README.md).
#
# Here, without a GPU, a smoke run checks the script's logic on tiny settings:
#   DEVICE=cpu QUICK=1 SKIP_INSTALL=1 OUT=/tmp/gpu-smoke WHAT="learning grpo trl-new mmoa" PY=.venv/bin/python \
#     bash benchmarks/gpu/run.sh main
# and `make test` runs the `mixed` and `claims` steps so from a tiny model folder (START=FOLDER; tests/test_gpu_recipe.py).
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
  part[0-9]*)
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
  more)  # a later call on the same warm machine: the wheels, the model and the runs are still in /tmp
    SKIP_INSTALL=1
    [ -d /tmp/site ] || [ "$DEVICE" = cpu ] || { echo "the machine was given back: /tmp/site is gone" >&2; exit 3; }
    export PYTHONPATH=/tmp/site:$PWD/src SEARCHENV_CACHE=${SEARCHENV_CACHE:-/tmp/searchenv-cache}
    ;;
  *) echo "usage: run.sh part1|part2|main|more" >&2; exit 2 ;;
esac

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  N=$(cat .gpu/parts)   # main carries the last part (and .gpu/parts)
  cp ".gpu/part$N/model.gguf.part" "$STAGE/part$N"
  for i in $(seq 1 "$N"); do cat "$STAGE/part$i"; done > "$STAGE/SmolLM2-135M-Instruct.gguf"
  echo "$(cat ".gpu/part$N/model.gguf.sha256")  $STAGE/SmolLM2-135M-Instruct.gguf" | sha256sum -c -
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
    TRL_ARGS=(--steps 2 --questions 2 --group 2 --micro-batch 4 --n-dev 4 --window 1 --max-new-tokens 32 --threads 1)
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
  STAND_IN=(); [ "$DEVICE" = cpu ] && STAND_IN=(--stand-in-graph)   # the capture counters, checked on the CPU
  "$PY" benchmarks/gpu_decode.py --device "$DEVICE" --rows 4 --max-new-tokens 8 --repeats 1 --threads 1 "${STAND_IN[@]}" \
    --first-turns-only --name gpu_decode_smoke
  cp benchmarks/results/gpu_decode_smoke.* "$OUT"/
else
  "$PY" benchmarks/gpu_decode.py --device "$DEVICE" --rows 128
  cp benchmarks/results/gpu_decode.json benchmarks/results/gpu_decode.md "$OUT"/
fi

# (1b) the packaged searcher's greedy EM from the default bfloat16 generation copy against float32, on the
# same 200 dev questions, every episode in flight (both arms on the device's default loop and graph).
if has dtype; then
  if [ "$QUICK" = 1 ]; then
    "$PY" benchmarks/searcher_cpu.py --device "$DEVICE" --n 4 --batch-size 4 --threads 1 --label searcher_dtype_smoke
    cp benchmarks/results/searcher_dtype_smoke.* "$OUT"/
  else
    "$PY" benchmarks/searcher_cpu.py --device "$DEVICE" --n 200 --batch-size 200 --threads 8 \
      --label searcher_gpu_dtype || echo "searcher_cpu.py failed: exit $?"
    cp benchmarks/results/searcher_gpu_dtype.* "$OUT"/ 2>/dev/null || true
  fi
fi

# (2) the learning recipe: SFT on 2,000 oracle demonstrations beside the heuristic on the same held-out
# questions. Full fine-tuning (issue 29's recipe); the shipped form is its weight change compressed to
# adapters (phase sft_adapters), loaded as users load them. With LORA=1 LoRA adapters are trained instead.
# `learning` runs SFT; `grpo` then runs 16 GRPO steps from it (same --out: the SFT phases are cached).
# The searcher that would ship is exported to $SEARCHER (not into the working tree, which the next call
# replaces) and comes back as searcher.tar.part-*; the result files come back in results.tar.
NAME=learning_2hop_gpu
ARGS=(--task synthetic-2hop --device "$DEVICE" --top-k 3 --max-turns 3 --max-doc-chars 450 --max-new-tokens 80
      --baselines heuristic --threads 8 --save-every 1000)
if [ "$LORA" = 1 ]; then
  NAME=learning_2hop_gpu_lora
  ARGS+=(--lora --lora-r 16)
  SFT_PHASES=baselines,sft GRPO_PHASES=grpo_outcome
else
  ARGS+=(--adapter-ranks "${RANKS:-40,16}")
  SFT_PHASES=baselines,sft,sft_adapters GRPO_PHASES=grpo_outcome,grpo_adapters
fi
if [ "$QUICK" = 1 ]; then
  NAME=${NAME}_smoke
  ARGS+=(--n-dev 4 --sft-demos 8 --sft-steps 2 --sft-batch 4 --grpo-steps 1 --grpo-batch 2 --grpo-group 2 --threads 1)
else
  ARGS+=(--n-dev 200 --sft-demos 2000 --sft-steps 180 --sft-batch 32 --sft-lr 5e-5
         --grpo-steps "${GRPO_STEPS:-16}" --grpo-batch 16 --grpo-group 8 --grpo-lr 2e-6)
fi
RUNS=/tmp/runs/$NAME
SEARCHER=${SEARCHER:-/tmp/searcher-export}

bring_back() {  # the result files (one tar) and the exported searcher (in parts under 16 MiB)
  local files=()
  for f in benchmarks/results/"$NAME".* benchmarks/results/"$NAME"_*.png benchmarks/results/trl_grpo_gpu*.* \
           "$RUNS"/*.json "$RUNS"/*/metrics.jsonl; do
    [ -f "$f" ] && files+=("$f")
  done
  if [ ${#files[@]} -gt 0 ]; then
    tar -cf "$OUT/results.tar.tmp" "${files[@]}" && mv "$OUT/results.tar.tmp" "$OUT/results.tar"
  fi
  if [ -f "$SEARCHER/searcher.json" ]; then  # parts made aside, moved in whole, the checksum last
    rm -rf "$OUT/.parts" && mkdir -p "$OUT/.parts"
    tar -C "$(dirname "$SEARCHER")" -cf "$OUT/.parts/searcher.tar" "$(basename "$SEARCHER")"
    (cd "$OUT/.parts" && split -b 15M searcher.tar searcher.tar.part- && sha256sum searcher.tar > sha && rm searcher.tar)
    rm -f "$OUT"/searcher.tar.part-* "$OUT/searcher.tar.sha256"
    mv "$OUT"/.parts/searcher.tar.part-* "$OUT"/ && mv "$OUT/.parts/sha" "$OUT/searcher.tar.sha256" && rmdir "$OUT/.parts"
  fi
  ls -l "$OUT"
}

if has learning; then
  "$PY" benchmarks/learning.py "${ARGS[@]}" --phases "$SFT_PHASES" --name "$NAME" --out "$RUNS" \
    --export-searcher --export-dir "$SEARCHER"
  bring_back
fi
if has grpo; then
  "$PY" benchmarks/learning.py "${ARGS[@]}" --phases "$SFT_PHASES,$GRPO_PHASES" --name "$NAME" --out "$RUNS" \
    --export-searcher --export-dir "$SEARCHER"
  bring_back
fi
# (3) TRL's GRPOTrainer from the SFT adapter of the searcher exported above (issue 30's rising reward).
if has trl-new; then
  if [ "$QUICK" = 1 ]; then
    TRL_ARGS=(--steps 2 --questions 2 --group 2 --micro-batch 4 --n-dev 4 --window 1 --max-new-tokens 32 --threads 1)
  else
    TRL_ARGS=(--threads 8 --time-budget "$TRL_BUDGET" ${TRL_EXTRA:-})
  fi
  TRL_NEW_NAME=trl_grpo_gpu_sft2000
  [ "$QUICK" = 1 ] && TRL_NEW_NAME=${TRL_NEW_NAME}_smoke
  FROM=()
  [ -f "$SEARCHER/searcher.json" ] && FROM=(--searcher "$SEARCHER")   # else the packaged searcher
  "$PY" benchmarks/trl_grpo.py --device "$DEVICE" "${TRL_ARGS[@]}" "${FROM[@]}" \
    --name "$TRL_NEW_NAME" || echo "trl_grpo.py failed: exit $?"
  bring_back
fi
# (4) MMOA-RAG (issue 44): joint MAPPO vs one role at a time, beside the heuristic pipeline.
if has mmoa; then
  NAME=mmoa_rag_gpu
  RUNS=/tmp/runs/$NAME
  MMOA_ARGS=(--task synthetic-2hop --device "$DEVICE" --top-k 3 --max-doc-chars 400 --max-new-tokens 48
             --save-every 1000)
  if [ "$QUICK" = 1 ]; then
    NAME=${NAME}_smoke RUNS=/tmp/runs/$NAME
    MMOA_ARGS+=(--n-dev 4 --sft-demos 8 --sft-steps 1 --sft-batch 4 --mappo-steps 1 --mappo-batch 2
                --mappo-samples 1 --threads 1)
  else
    MMOA_ARGS+=(--n-dev 200 --sft-demos 1000 --sft-steps 60 --sft-batch 32 --sft-lr 5e-5
                --mappo-steps "${MAPPO_STEPS:-10}" --mappo-batch 16 --mappo-samples 4 --mappo-epochs 2
                --mappo-minibatches 2 --mappo-lr 1e-5 --threads 8)
  fi
  "$PY" benchmarks/mmoa_rag.py "${MMOA_ARGS[@]}" --phases "${MMOA_PHASES:-baselines,sft,mappo_all}" \
    --name "$NAME" --out "$RUNS" || echo "mmoa_rag.py failed: exit $?"
  bring_back
fi
# (5) issue 58's two CPU results at GPU size: the mixed-task SFT against the heuristic on every task, then the
# papers' claims over seeds (benchmarks/claims.py, in its order), each resumable: a later `more` call with the
# same WHAT continues where the last one stopped (runs under $RUNS_ROOT). Results come back into $OUT.
RUNS_ROOT=${RUNS_ROOT:-/tmp/runs}
if has mixed; then
  if [ "$QUICK" = 1 ]; then
    MIXED_ARGS=(--start "${START:-searcher}" --minutes 0.2 --max-steps 1 --demos 1 --n 2 --train-layers 1
                --name cpu_mixed_smoke --run "$RUNS_ROOT/mixed_smoke")
  else
    MIXED_ARGS=(--minutes "${MIXED_MINUTES:-30}" --demos 400 --train-layers 0 --lr 5e-5 --n 100 --name gpu_mixed
                --run "$RUNS_ROOT/gpu_mixed")
  fi
  "$PY" benchmarks/cpu_mixed.py --device "$DEVICE" --results "$OUT" "${MIXED_ARGS[@]}" || echo "cpu_mixed.py failed: exit $?"
fi
if has claims; then
  if [ "$QUICK" = 1 ]; then
    CLAIMS_ARGS=(--claim r3rag-process --start "${START:-searcher-sft}" --seeds 2 --steps 1 --batch 2 --group 2 --n-dev 2
                 --train-layers 1 --max-new-tokens 16 --threads 1 --out "$RUNS_ROOT/claims_smoke"
                 --doc "$OUT/claims_smoke.md")
  else
    CLAIMS_ARGS=(--claim r3rag-process --claim rl-beyond-sft --claim frugal --claim rex --claim ur2 --seeds 5
                 --steps 30 --batch 8 --group 8 --lr 2e-6 --train-layers 0 --n-dev 200 --threads 8
                 --max-minutes "${CLAIMS_MINUTES:-8}" --out "$RUNS_ROOT/claims_gpu" --doc "$OUT/claims.md")
  fi
  "$PY" benchmarks/claims.py --device "$DEVICE" --results "$OUT" "${CLAIMS_ARGS[@]}" || echo "claims.py failed: exit $?"
  tar -cf "$OUT/claims_runs.tar" -C "$RUNS_ROOT" $(cd "$RUNS_ROOT" && ls -d claims_*/*.json 2>/dev/null) 2>/dev/null || true
fi
uptime >> "$OUT/load.txt"
ls -l "$OUT"
