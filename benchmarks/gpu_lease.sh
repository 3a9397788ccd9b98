#!/usr/bin/env bash
# One device lease as one command: a list of config runs (`python -m benchmarks.run --config
# benchmarks/configs/X.py --set KEY=VALUE ...`), stages in the order of what they decide, each under its own
# time limit, all inside BUDGET seconds (540: one 600 s device call with room to spare). Each stage
# appends a line to $OUT/stages.jsonl when it ends and `python -m benchmarks.run --lease-merge` then
# rewrites $OUT/gpu.json (every stage: status, seconds, limit, log, rows), so a stage killed by its
# limit loses only itself, and so does the whole command cut short. Every output is under $OUT.
#
# Usage, from the repository root:
#
#   OUT=gpu_out bash benchmarks/gpu_lease.sh            # all: s0 s1 s2 s3 s4 s5
#   OUT=gpu_out bash benchmarks/gpu_lease.sh s1 s3      # some stages, in the order given
#   (s3_fold and s3_pack are s3's two halves: r110_base/_fold/_fold_unfused, r110_pack*)
#
# CPU check of the script itself (tests/test_benchmarks_smoke.py runs it, stage group by stage
# group, at benchmarks/levers.py's LEASE_SMOKE sizes; LIMIT_SCALE=10000 there so that no load of
# the machine times a stage out):
#
#   LIMIT_SCALE=10000 NUM=8 N0=8 IMAGES=1 BATCH=8 CONV_BATCH=8 LENET_NUMS=8,16 LENET_BATCH=8 \
#     R50_SIZE=32 R50_NUM=8 R50_BATCH=8 R110_MODEL=resnet20 TWIN_MODELS=mlp TWIN_COMPILE=default \
#     OUT=lease bash benchmarks/gpu_lease.sh all
#
# Stages (limit, s) and what each decides:
#   s0  env (20): versions (jax, jaxlib, flax, torch, CUDA, cuDNN), nvidia-smi, the device, the
#       topology's target_config (for later deviceless compiles): env.json, nvidia-smi.txt.
#   s1  conv (60), conv_unfused (30): the 16-channel 3x3 conv alone (benchmarks/configs/conv_micro.py) at
#       batch CONV_BATCH: packed 2/4, zero-padded, grouped, the 32-ch stage-2 reference, with and
#       without the fused epilogues; conv_unfused repeats the base and 2-packed cases with the
#       cudnn-fused-convolution-rewriter pass disabled. Decides whether packing, padding or fused
#       epilogues beat the 16-channel kernel. conv.json, conv_unfused.json, autotune_conv.txtpb.
#   s2  lenet_scaling (45), lenet_trace (25), lenet_nocmdbuf (20, GPU only): LeNet bf16 at
#       LENET_NUMS with batch LENET_BATCH, fit intercept (fixed ms per call) and slope (ns per
#       sample); one traced certification at the largest N; the largest N again with CUDA-graph
#       command buffers off. Decides fixed cost against device work.
#   s3  r110_base, r110_fold, r110_fold_unfused, r110_pack2, r110_pack2_fold, r110_pack4 (30
#       each): ResNet-110 bf16, rsjax alone, one process per variant, batch BATCH, IMAGES images:
#       args.fold_bn, folded with the fused-conv rewriter off, args.pack 2/4 (2 also folded).
#   s4  r50 (100): ResNet-50 bf16 (224 px, R50_SIZE), batch R50_BATCH, N = R50_NUM, rsjax alone,
#       compile seconds apart from seconds per image; autotune_r50.txtpb.
#   s5  twin_<model> for each of TWIN_MODELS (what is left of BUDGET; a model starts only with
#       TWIN_MIN s left): the PyTorch twin eager and under torch.compile (TWIN_COMPILE: auto = the
#       first of max-autotune-no-cudagraphs, reduce-overhead, default that runs), compile seconds
#       apart, beside rsjax. Decides the ratio to a compiled twin.
# Older stages, outside the budget plan: golden, trace (ResNet-110), dataset, suite.
#
# Environment (defaults): OUT (gpu_out), PYTHON (python3), BUDGET (540), LIMIT_SCALE (100: percent
# applied to every limit and to BUDGET, for slow machines), NUM (100000), N0 (100), IMAGES (2),
# BATCH (14288: ResNet-110/20), CONV_BATCH (14288), LENET_NUMS (1000,10000,100000), LENET_BATCH
# (BATCH), R50_BATCH (1024), R50_NUM (NUM), R50_SIZE (the model's 224), R110_MODEL
# (resnet110: s3's model; the CPU check runs its variants on resnet20), TWIN_MODELS (resnet110
# resnet20 resnet50), TWIN_COMPILE (auto), TWIN_MIN (60), CACHE_DIR (/tmp/rsjax_lease_cache: the
# JAX persistent compilation cache shared by every stage), DATASET_IMAGES (100, stage dataset).
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
LIMIT_SCALE=${LIMIT_SCALE:-100}
BUDGET=$((${BUDGET:-540} * LIMIT_SCALE / 100))
NUM=${NUM:-100000}
N0=${N0:-100}
IMAGES=${IMAGES:-2}
BATCH=${BATCH:-14288}
CONV_BATCH=${CONV_BATCH:-14288}
LENET_NUMS=${LENET_NUMS:-1000,10000,100000}
LENET_BATCH=${LENET_BATCH:-$BATCH}
R50_BATCH=${R50_BATCH:-1024}
R50_NUM=${R50_NUM:-$NUM}
R50_SIZE=${R50_SIZE:-}
TWIN_MODELS=${TWIN_MODELS:-resnet110 resnet20 resnet50}
R110_MODEL=${R110_MODEL:-resnet110}
TWIN_COMPILE=${TWIN_COMPILE:-auto}
TWIN_MIN=${TWIN_MIN:-60}
DATASET_IMAGES=${DATASET_IMAGES:-100}
CACHE_DIR=${CACHE_DIR:-/tmp/rsjax_lease_cache}
mkdir -p "$CACHE_DIR"
export JAX_COMPILATION_CACHE_DIR=$CACHE_DIR
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
export JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1
ON_GPU=false
nvidia-smi -L >/dev/null 2>&1 && ON_GPU=true
T0=$SECONDS
NOFUSE=--xla_disable_hlo_passes=cudnn-fused-convolution-rewriter

lim() { echo $(($1 * LIMIT_SCALE / 100)); }

record() {  # record NAME STATUS RC SECONDS LIMIT JSON: one line of stages.jsonl, then the merge
  printf '{"stage": "%s", "status": "%s", "rc": %s, "seconds": %s, "limit": %s, "log": "%s", "json": "%s"}\n' \
    "$1" "$2" "$3" "$4" "$5" "logs/$1.log" "$6" >>"$OUT/stages.jsonl"
  "$PY" -m benchmarks.run --lease-merge "$OUT" >/dev/null 2>&1 || echo "merge failed"
}

stage() {  # stage NAME LIMIT JSON COMMAND...: COMMAND under min(LIMIT, what is left of BUDGET)
  local name=$1 limit=$2 json=$3
  shift 3
  local left=$((BUDGET - (SECONDS - T0)))
  ((limit > left)) && limit=$left
  if ((limit < 5)); then
    echo "=== $name: skipped (budget spent)"
    record "$name" "skipped: budget spent" null 0 "$limit" ""
    return
  fi
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s, $((SECONDS - T0)) s so far)"
  timeout -k 5 "$limit" "$@" >"$OUT/logs/$name.log" 2>&1
  local rc=$? status=ok
  ((rc == 124 || rc == 137)) && status=timeout
  ((rc != 0 && rc != 124 && rc != 137)) && status="failed (rc $rc)"
  tail -n 12 "$OUT/logs/$name.log"
  echo "=== $name: $status, $((SECONDS - t0)) s"
  { echo "=== $name: $status, $((SECONDS - t0)) s"; cat "$OUT/logs/$name.log"; } >>"$OUT/lease.log"
  record "$name" "$status" "$rc" "$((SECONDS - t0))" "$limit" "$json"
}

skip() {  # skip NAME REASON
  echo "=== $1: skipped: $2"
  record "$1" "skipped: $2" null 0 0 ""
}

xla() {  # xla FLAG...: XLA_FLAGS with FLAG... added (no blank one: XLA would read it as a file)
  local all="${XLA_FLAGS:-} $*"
  echo $all
}

dump() {  # dump FILE: the XLA flag that saves the autotune results there (GPU only)
  $ON_GPU && echo "--xla_gpu_dump_autotune_results_to=$OUT/$1"
}

cfg() {  # cfg CONFIG KEY=VALUE...: CMD = the run of benchmarks/configs/CONFIG.py with each --set
  local config=$1 kv
  shift
  CMD=("$PY" -m benchmarks.run --config "benchmarks/configs/$config.py")
  for kv in "$@"; do CMD+=(--set "$kv"); done
}

suite() {  # suite NAME LIMIT XLA_FLAGS KEY=VALUE...: one run of configs/gpu_suite.py
  local name=$1 limit=$2 flags=$3
  shift 3
  cfg gpu_suite "json=$OUT/$name.json" "args.compile_cache=$CACHE_DIR" "$@"
  stage "$name" "$limit" "$name.json" env XLA_FLAGS="$flags" "${CMD[@]}"
}

r110() {  # r110 NAME XLA_FLAGS KEY=VALUE...: a ResNet-110 bf16 variant, rsjax alone
  local name=$1 flags=$2
  shift 2
  suite "$name" "$(lim 30)" "$flags" "args.models=$R110_MODEL" args.precisions=bf16 "args.num=$NUM" \
    "args.n0=$N0" "args.images=$IMAGES" "args.batch_size=$BATCH" args.reference=false "$@"
}

twin() {  # twin MODEL: rsjax, the eager twin and the compiled twin on one model, bf16
  local m=$1 left=$((BUDGET - (SECONDS - T0)))
  if ((left < $(lim "$TWIN_MIN"))); then
    skip "twin_$m" "${left} s left, under TWIN_MIN"
    return
  fi
  local args=("args.num=$NUM" "args.batch_size=$BATCH")
  case $m in
    resnet50) args=("args.num=$R50_NUM" "args.batch_size=$R50_BATCH" ${R50_SIZE:+"args.input_size=$R50_SIZE"}) ;;
    lenet) args=("args.num=$NUM" "args.batch_size=$LENET_BATCH") ;;
  esac
  suite "twin_$m" "$left" "${XLA_FLAGS:-}" "args.models=$m" args.precisions=bf16 "args.n0=$N0" \
    "args.images=$IMAGES" "args.twin_compile=$TWIN_COMPILE" "${args[@]}"
}

s0() {
  nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
    >>"$OUT/nvidia-smi.txt" 2>&1
  stage env "$(lim 20)" env.json "$PY" -m benchmarks.run --lease-env "$OUT"
}

s1() {
  cfg conv_micro "json=$OUT/conv.json" "args.batch=$CONV_BATCH"
  stage conv "$(lim 60)" conv.json env XLA_FLAGS="$(xla "$(dump autotune_conv.txtpb)")" "${CMD[@]}"
  cfg conv_micro "json=$OUT/conv_unfused.json" "args.batch=$CONV_BATCH" args.check=false \
    args.cases=base16,pack2 args.epilogues=bias_relu,bias_res_relu args.tag=unfused
  stage conv_unfused "$(lim 30)" conv_unfused.json env XLA_FLAGS="$(xla $NOFUSE)" "${CMD[@]}"
}

s2() {
  local top=${LENET_NUMS##*,}
  cfg n_scaling "json=$OUT/lenet_scaling.json" "args.nums=$LENET_NUMS" "args.n0=$N0" \
    "args.batch_size=$LENET_BATCH" "args.compile_cache=$CACHE_DIR"
  stage lenet_scaling "$(lim 45)" lenet_scaling.json "${CMD[@]}"
  cfg trace_resnet110 args.model=lenet "args.num=$top" "args.n0=$N0" \
    "args.batch_size=$LENET_BATCH" "args.out=$OUT/trace_lenet"
  stage lenet_trace "$(lim 25)" trace_lenet/trace_summary.json "${CMD[@]}"
  if $ON_GPU; then
    cfg n_scaling "json=$OUT/lenet_nocmdbuf.json" "args.nums=$top" "args.n0=$N0" \
      "args.batch_size=$LENET_BATCH"
    stage lenet_nocmdbuf "$(lim 20)" lenet_nocmdbuf.json \
      env XLA_FLAGS="$(xla --xla_gpu_enable_command_buffer=)" "${CMD[@]}"
  else
    skip lenet_nocmdbuf "not a GPU"
  fi
}

s3() {
  s3_fold
  s3_pack
}

s3_fold() {  # s3's first half: the base, folded, folded with the fused-conv rewriter off
  r110 r110_base "${XLA_FLAGS:-}"
  r110 r110_fold "${XLA_FLAGS:-}" args.fold_bn=true
  r110 r110_fold_unfused "$(xla $NOFUSE)" args.fold_bn=true
}

s3_pack() {  # s3's second half: packed by 2 (also folded) and by 4
  r110 r110_pack2 "${XLA_FLAGS:-}" args.pack=2
  r110 r110_pack2_fold "${XLA_FLAGS:-}" args.pack=2 args.fold_bn=true
  r110 r110_pack4 "${XLA_FLAGS:-}" args.pack=4
}

s4() {
  suite r50 "$(lim 100)" "$(xla "$(dump autotune_r50.txtpb)")" args.models=resnet50 \
    args.precisions=bf16 "args.num=$R50_NUM" "args.n0=$N0" args.images=1 \
    "args.batch_size=$R50_BATCH" args.reference=false ${R50_SIZE:+"args.input_size=$R50_SIZE"}
}

s5() {
  for m in $TWIN_MODELS; do twin "$m"; done
}

# The project needs flax >= 0.12.8: where the machine's is older, the carried wheel (.whl/).
if ! "$PY" -c 'import flax, sys; v = tuple(int(p) for p in flax.__version__.split(".")[:3])
sys.exit(v < (0, 12, 8))' 2>/dev/null && ls .whl/flax-*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/flax-*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

[ $# -eq 0 ] && set -- all
for s in "$@"; do
  case $s in
    all) s0; s1; s2; s3; s4; s5 ;;
    s0 | env) s0 ;;
    s1) s1 ;;
    s2) s2 ;;
    s3) s3 ;;
    s3_fold) s3_fold ;;
    s3_pack) s3_pack ;;
    s4) s4 ;;
    s5 | compiled) s5 ;;
    golden)  # the golden outputs (made on a CPU) against this device at the default precision
      stage golden "$(lim 150)" "" env JAX_PLATFORMS= PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
        "$PY" tests/golden_cases.py --check --save "$OUT/golden_gpu.npz" ;;
    trace)  # where the time of one ResNet-110 certification goes, by op class
      cfg trace_resnet110 "args.num=$NUM" "args.n0=$N0" "args.batch_size=$BATCH" \
        "args.out=$OUT/trace_r110"
      stage trace "$(lim 120)" trace_r110/trace_summary.json "${CMD[@]}" ;;
    dataset)  # test-set-sized certification: fixed N and budgeted, rsjax vs the eager twin
      suite dataset "$(lim 200)" "${XLA_FLAGS:-}" "args.num=$NUM" args.images=0 args.models=none \
        args.precisions=bf16 "args.dataset_images=$DATASET_IMAGES" args.dataset_model=resnet110 ;;
    suite)  # the suite's rows, the twin eager
      suite suite "$(lim 240)" "${XLA_FLAGS:-}" args.models=lenet,resnet20,resnet110 \
        args.precisions=bf16,fp32 "args.num=$NUM" "args.images=$IMAGES" ;;
    *) echo "unknown stage $s" ;;
  esac
done
echo "=== done in $((SECONDS - T0)) s (budget ${BUDGET} s)"
"$PY" -m benchmarks.run --lease-merge "$OUT"
