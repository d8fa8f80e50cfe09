#!/usr/bin/env bash
# Prepare, on this (CPU) machine, everything a lent GPU machine needs to run benchmarks/gpu/run.sh.
#
# The GPU machine has torch, transformers, peft, safetensors, accelerate, pyarrow, typer and rich,
# but not gymnasium, bm25s, PyStemmer, gguf, trl or datasets, and it cannot download anything: they travel as wheels for its Python
# (3.12, x86-64). This package runs from the working tree's src/ (which travels anyway; a wheel of
# it would carry the packaged adapters a second time). The packaged model (SmolLM2-135M-Instruct,
# a 98 MB GGUF) is over what one device call carries beside the working tree (64 MiB a call, the
# tree included), so it travels in parts, as many as the tree's size asks for, one part a call.
#
# Writes .gpu/ (git-ignored):
#   .gpu/whl/      wheels of the missing dependencies
#   .gpu/part1/ ... .gpu/partN/   the GGUF in N parts (the last one with its sha256); .gpu/parts holds N
#
#   bash benchmarks/gpu/prepare.sh        # then see benchmarks/gpu/README.md for the device calls
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
OUT=.gpu
rm -rf "$OUT.tmp" && mkdir -p "$OUT.tmp/whl"
# Wheels for the GPU machine's Python (see the device tool's README for the platform flags).
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d "$OUT.tmp/whl" \
  gymnasium farama-notifications bm25s PyStemmer rank-bm25 gguf
# TRL for benchmarks/trl_grpo.py, with the datasets release whose requirements the GPU image meets
# (5.1+ asks for pyarrow>=24; 5.0 for pyarrow>=21 and huggingface-hub<2, the image has 1.33).
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d "$OUT.tmp/whl" \
  trl==1.16.0 datasets==5.0.0 dill==0.4.1 multiprocess==0.70.19
# The packaged GGUF, in parts that fit beside the working tree (tracked files) and the wheels.
GGUF=$("$PY" -c "from agents.policies.hf import packaged_gguf_path; print(packaged_gguf_path())")
SIZE=$(stat -c %s "$GGUF")
TREE=$(git ls-files -z | du --files0-from=- -cb 2>/dev/null | tail -1 | cut -f1)
WHL=$(du -sb "$OUT.tmp/whl" | cut -f1)
ROOM=$(( 64 * 1024 * 1024 - TREE - WHL - 2 * 1024 * 1024 ))   # 2 MiB to spare
if [ "$ROOM" -lt $(( 4 * 1024 * 1024 )) ]; then
  echo "the working tree ($TREE bytes) leaves no room for the model in a 64 MiB device call" >&2; exit 1
fi
N=$(( (SIZE + ROOM - 1) / ROOM ))
PART=$(( (SIZE + N - 1) / N ))
for i in $(seq 1 "$N"); do
  mkdir -p "$OUT.tmp/part$i"
  dd if="$GGUF" of="$OUT.tmp/part$i/model.gguf.part" bs="$PART" skip=$((i - 1)) count=1 status=none
done
sha256sum "$GGUF" | cut -d' ' -f1 > "$OUT.tmp/part$N/model.gguf.sha256"
echo "$N" > "$OUT.tmp/parts"
echo "the model travels in $N parts of $PART bytes (tree $TREE bytes): calls part1 .. part$((N - 1)), then main with part$N"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
du -sh "$OUT"/* 
