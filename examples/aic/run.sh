#!/usr/bin/env bash
# The README's H100 vs H200 answer, from a fresh clone with servesim[aic,plot] installed:
# two grid profiles from aiconfigurator-core, the Mooncake trace, and a target search on each.
set -euo pipefail
cd "$(dirname "$0")"
servesim import mooncake ../../benchmarks/traces/mooncake/conversation_trace.jsonl -o mooncake.json
for gpu in h100_sxm h200_sxm; do
  servesim profile aic --model Qwen/Qwen3-8B --system "$gpu" --backend vllm --backend-version 0.24.0 \
    --scenario "scenario-$gpu.json" --memory-fraction 0.9 \
    --grid-output "grid-$gpu.json" --summary-json "profile-$gpu.json"
  servesim sweep "sweep-$gpu.json" --target --csv "target-$gpu.csv" --json "target-$gpu.json" \
    --plot "sweep-$gpu.png"
done
