#!/usr/bin/env bash
# One lease of a GPU machine, in stages, each under its own time limit, every output under $OUT
# (a stage cut off by its limit loses only itself: the suite merges each model into the JSON as it
# finishes). Run from the repository root:
#
#   OUT=gpu_out bash benchmarks/gpu_lease.sh env suite golden trace dataset compiled
#
# (``suite`` is the stages r110bf16 r110fp32 small r50bf16 r110tf32, in that order.)
#
# IMAGES (default 5) images per model and precision after the warm-up image; NUM (default 100000)
# samples; DATASET_IMAGES (default 100) images of the fixed-N / budgeted ResNet-110 row. On a CPU,
# NUM=200 IMAGES=1 DATASET_IMAGES=4 runs every stage in minutes (a check of the script itself).
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
IMAGES=${IMAGES:-5}
NUM=${NUM:-100000}
DATASET_IMAGES=${DATASET_IMAGES:-100}
JSON="$OUT/gpu.json"

stage() {  # stage NAME SECONDS COMMAND...: runs COMMAND under a limit, logs to $OUT/lease.log
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s)"
  timeout "$limit" "$@" >"/tmp/lease_$name.log" 2>&1
  local rc=$?
  { echo "=== $name: rc $rc, $((SECONDS - t0)) s"; cat "/tmp/lease_$name.log"; } >>"$OUT/lease.log"
  tail -n 25 "/tmp/lease_$name.log"
  echo "=== $name: rc $rc, $((SECONDS - t0)) s"
}

suite() {  # suite NAME SECONDS ARGS...: one process per call (its own peak memory)
  local name=$1 limit=$2
  shift 2
  stage "$name" "$limit" "$PY" -m benchmarks.throughput --suite gpu --num "$NUM" \
    --images "$IMAGES" --json "$JSON" "$@"
}

# The project needs flax >= 0.12.8: where the machine's is older, the carried wheel (.whl/).
if ! "$PY" -c 'import flax, sys; v = tuple(int(p) for p in flax.__version__.split(".")[:3])
sys.exit(v < (0, 12, 8))' 2>/dev/null && ls .whl/flax-*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/flax-*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

for s in "$@"; do
  case $s in
    env)
      stage env 60 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
        --format=csv; $PY -c 'import sys, jax, jaxlib, flax, optax, numpy, scipy
print(sys.version); print(jax.__version__, jaxlib.__version__, flax.__version__, optax.__version__,
numpy.__version__, scipy.__version__); print(jax.devices())
try:
  import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())
except Exception as e: print(\"torch:\", e)'" ;;
    golden)  # the golden outputs (made on a CPU) against this device at the default precision
      stage golden 150 env JAX_PLATFORMS= PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" tests/golden_cases.py --check \
        --save "$OUT/golden_gpu.npz" ;;
    r110bf16) suite resnet110_bf16 110 --models resnet110 --precisions bf16 --twin-compile none ;;
    r110fp32) suite resnet110_fp32 110 --models resnet110 --precisions fp32 --twin-compile none ;;
    r110tf32) suite resnet110_tf32 90 --models resnet110 --precisions tf32 --twin-compile none ;;
    small)  # bf16 first: the device peak is the process's so far
      suite small 120 --models lenet,resnet20 --precisions bf16,tf32,fp32 --twin-compile none ;;
    r50bf16) suite resnet50_bf16 240 --models resnet50 --precisions bf16 --twin-compile none ;;
    suite)  # every row; the twin eager (cuDNN autotuned, channels-last, autocast)
      for t in r110bf16 r110fp32 small r50bf16 r110tf32; do bash "$0" "$t"; done ;;
    compiled)  # the twin under torch.compile (default mode) on the headline row
      stage compiled 150 "$PY" -m benchmarks.throughput --suite gpu --num "$NUM" \
        --images "$IMAGES" --json "$OUT/gpu_compiled.json" --models resnet110 \
        --precisions bf16 --twin-compile default ;;
    dataset)  # test-set-sized certification: fixed N and budgeted, rsjax vs the twin
      stage dataset 200 "$PY" -m benchmarks.throughput --suite gpu --num "$NUM" --images 0 \
        --json "$OUT/gpu_dataset.json" --models none --precisions bf16 --twin-compile none \
        --dataset-images "$DATASET_IMAGES" --dataset-model resnet110 ;;
    trace)  # where the time of one ResNet-110 certification goes, by op class
      stage trace 120 "$PY" -m benchmarks.trace_summary --model resnet110 --precision bf16 \
        --num "$NUM" --out "$OUT" ;;
    *) echo "unknown stage $s" ;;
  esac
done
