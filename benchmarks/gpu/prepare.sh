#!/usr/bin/env bash
# Prepare, on this (CPU) machine, everything a lent GPU machine needs to run benchmarks/gpu/run.sh.
#
# The GPU machine has torch, transformers, peft, safetensors, accelerate, pyarrow, typer and rich,
# but not gymnasium, bm25s, PyStemmer, gguf, trl or datasets, and it cannot download anything: they travel as wheels for its Python
# (3.12, x86-64). This package runs from the working tree's src/ (which travels anyway; a wheel of
# it would carry the 15 MB of packaged adapters a second time). The packaged model
# (SmolLM2-135M-Instruct, a 98 MB GGUF) is over what one device call carries beside the 21 MB
# working tree (64 MiB a call), so it travels in three parts over three calls.
#
# Writes .gpu/ (git-ignored):
#   .gpu/whl/      wheels of the missing dependencies
#   .gpu/part1/ .gpu/part2/ .gpu/part3/   the GGUF in three parts, with its sha256
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
# The packaged GGUF, in three parts.
GGUF=$("$PY" -c "from agents.policies.hf import packaged_gguf_path; print(packaged_gguf_path())")
SIZE=$(stat -c %s "$GGUF")
PART=$(( (SIZE + 2) / 3 ))
for i in 1 2 3; do
  mkdir -p "$OUT.tmp/part$i"
  dd if="$GGUF" of="$OUT.tmp/part$i/model.gguf.part" bs="$PART" skip=$((i - 1)) count=1 status=none
done
sha256sum "$GGUF" | cut -d' ' -f1 > "$OUT.tmp/part3/model.gguf.sha256"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
du -sh "$OUT"/* 
