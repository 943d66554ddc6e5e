#!/usr/bin/env bash
# Every GPU validation in one go (one device call): results land in $OUT, else in validation/.
#   bash scripts/gpu_all.sh
# Each script is capped by `timeout` so one slow part cannot eat the others' time, and each
# writes its JSON as it goes. Without CUDA every script says "skipped" and writes nothing.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
O=${OUT:-validation}
mkdir -p "$O"
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
echo "== stack"; timeout 170 python3 scripts/gpu_stack_validate.py --out "$O/stack-gpu.json" --budget 140
echo "== crosscheck"; timeout 90 python3 scripts/gpu_validate.py --out "$O/trace-gpu.json"
echo "== allocator"; rm -rf /tmp/vl-alloc; timeout 80 python3 scripts/gpu_allocator_validate.py --out "$O/allocator-gpu.json" --keep /tmp/vl-alloc
[ -d /tmp/vl-alloc ] && tar czf "$O/allocator-snapshots.tar.gz" -C /tmp/vl-alloc . && ls -l "$O/allocator-snapshots.tar.gz"
echo "== watch"; timeout 80 python3 scripts/gpu_watch_validate.py --out "$O/watch-gpu.json"
echo "== done"
