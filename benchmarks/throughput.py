"""Throughput of rsjax's counts engine, side by side with the PyTorch reference loop.

One command measures, per model (random weights, one input):

* rsjax (``rsjax.sample_counts`` / ``rsjax.certify``): steady-state samples per
  second, compile time, seconds per certified image (n0 = 100 plus N), the
  compiled step's memory (``memory_analysis()``), peak process RSS (CPU) or
  peak device memory (GPU/TPU), FLOPs per forward pass (XLA
  ``cost_analysis()``) and model-FLOP utilization when the device peak is known
  (``--peak-gflops`` on a CPU);
* the reference (``benchmarks.reference_torch``: Cohen et al.'s ``_sample_noise``
  loop, float32, batch 400, host counting) on a PyTorch copy of *the same
  weights* (the logits are checked to agree before timing), when PyTorch is
  installed; and the ratio rsjax / reference;
* optionally (``--bf16``) rsjax with ``compute_dtype=jnp.bfloat16``, its speed and
  how far its counts are from float32 on the same noise.

rsjax and the reference are timed alternately, repetition by repetition, so a
shared machine slows both alike; the best repetition of each is reported (and
the median). The reference runs at each ``--threads`` setting of
``torch.set_num_threads`` (default: all cores, and 1) and the fastest counts:
PyTorch's multi-threaded pool can collapse when other processes load the cores.
Seconds per certified image at N = 100,000 are *measured* when ``--num`` is
100,000 and *extrapolated* from the measured steady state otherwise
(``t(certify at num) + (100000 - num) / rate``); the output says which.

Commands::

  python -m benchmarks.throughput --quick                     # all models, small N (CPU)
  python -m benchmarks.throughput --models lenet,mlp --num 100000
  python -m benchmarks.throughput --models resnet20 --bf16 --json out.json
  python -m benchmarks.throughput --suite gpu                 # GPU suite, docs/PERFORMANCE.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks.measure import (
  SPECS,
  CompileClock,
  enable_compile_cache,
  environment,
  torch,
)
from benchmarks.throughput_workload import N0, run_model
from rsjax.verify.checks import PACKS

# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------


def _fmt(v, spec="{:.0f}"):
  return "-" if v is None else spec.format(v)


def table(results: list[dict]) -> str:
  """Markdown table of the main figures."""
  head = (
    "| model | N | batch | rsjax samples/s | reference samples/s (threads) | ratio (best / median) "
    "| rsjax s/image @100k | reference s/image @100k | compile s | step MB | MFLOP/sample "
    "| GFLOP/s | bf16 samples/s |"
  )
  rows = [head, "|" + "---|" * (head.count("|") - 1)]
  for r in results:
    ratio = "-" if "ratio" not in r else f"{r['ratio']:.2f} / {r['ratio_median']:.2f}"
    rows.append(
      f"| {r['model']} | {r['num']} | {r['batch_size']} | {_fmt(r['rsjax_samples_per_s'])} | "
      f"{_fmt(r.get('reference_samples_per_s'))} ({r.get('reference_threads', '-')}) | {ratio} | "
      f"{_fmt(r['rsjax_s_per_image'], '{:.1f}')} ({'meas.' if r['s_per_image_kind'] == 'measured' else 'extrap.'}) | "
      f"{_fmt(r.get('reference_s_per_image'), '{:.1f}')} | {r['compile_s']:.1f} | "
      f"{r['step_memory_mb']:.0f} | {r['flops_per_sample'] / 1e6:.2f} | "
      f"{r['rsjax_gflops']:.1f} | {_fmt(r.get('bf16_samples_per_s'))} |"
    )
  return "\n".join(rows)


GOALS = {"lenet": 1.5, "mlp": 1.5, "resnet20": 1.0}


def main(argv=None) -> list[dict]:
  p = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument(
    "--suite",
    choices=("throughput", "gpu"),
    default="throughput",
    help="'gpu': the GPU certification suite (docs/PERFORMANCE.md) against the "
    "tuned twin (benchmarks.suite), writes benchmarks/results/gpu.json",
  )
  p.add_argument("--quick", action="store_true", help="small N for a shared CPU (minutes)")
  p.add_argument(
    "--models",
    default=None,
    help=f"comma-separated, from {sorted(SPECS)} (default: all; with --suite gpu "
    "lenet,resnet20,resnet110,resnet50; 'none': only the --dataset-images row)",
  )
  p.add_argument(
    "--num",
    type=int,
    default=None,
    help="samples per timed run (default: per model, smaller with --quick; "
    "100,000 with --suite gpu)",
  )
  p.add_argument("--n0", type=int, default=N0, help="--suite gpu: selection samples")
  p.add_argument(
    "--images", type=int, default=50, help="--suite gpu: images certified after the warm-up image"
  )
  p.add_argument(
    "--precisions",
    default="fp32,bf16",
    help="--suite gpu: from fp32 (full-precision matmuls, rsjax's default), tf32, bf16",
  )
  p.add_argument(
    "--dataset-images",
    type=int,
    default=0,
    help="--suite gpu: also time certifying this many images (500: the CIFAR "
    "test-set figure) at fixed N and budgeted, rsjax vs the twin",
  )
  p.add_argument("--dataset-model", default="resnet110", help="--suite gpu: model of that row")
  p.add_argument(
    "--fold-bn",
    action="store_true",
    help="--suite gpu: rsjax certifies the model with batch norm folded into its "
    "convolutions (rsjax.models.fold_batch_norm)",
  )
  p.add_argument(
    "--pack",
    type=int,
    default=1,
    choices=list(PACKS),
    help="--suite gpu: rsjax runs the stage of fewer than 32 channels on G samples packed "
    "in the channel axis (rsjax.models.pack_narrow_stage; models without one run "
    "unpacked); each row records its 'pack'",
  )
  p.add_argument(
    "--twin-compile",
    default="none",
    help="--suite gpu: 'none' (the eager twin alone), 'auto' (the first of "
    "max-autotune-no-cudagraphs, reduce-overhead, default that runs) or torch.compile "
    "modes, comma-separated, tried in order: the compiled twin is timed beside the eager one",
  )
  p.add_argument(
    "--input-size",
    type=int,
    default=None,
    help="--suite gpu: square inputs of this many pixels instead of the model's usual "
    "size (a small ResNet-50 for a CPU check)",
  )
  p.add_argument(
    "--device-peaks",
    default=None,
    help="--suite gpu: 'bf16_tflops,fp32_tflops,hbm_tbps' (or with tf32_tflops "
    "after bf16) for MFU and the "
    "bound of docs/PERFORMANCE.md (H100/H200 are built in)",
  )
  p.add_argument(
    "--compile-cache",
    "--cache-dir",
    default=None,
    help="directory of JAX's persistent compilation cache (reused across runs)",
  )
  p.add_argument("--reps", type=int, default=None, help="timed repetitions (default 2 quick, 3)")
  p.add_argument("--batch-size", default="auto", help="rsjax forward batch: 'auto' or an int")
  p.add_argument("--no-reference", action="store_true", help="skip the PyTorch reference")
  p.add_argument("--bf16", action="store_true", help="also time compute_dtype=bfloat16")
  p.add_argument(
    "--noise",
    default="gaussian",
    help="rsjax noise: 'gaussian' (default stream) or 'gaussian_fast' (threefry13)",
  )
  p.add_argument(
    "--threads",
    default=None,
    help="comma-separated torch.set_num_threads values for the reference; each is "
    "timed and the fastest counts (default: all cores, and 1)",
  )
  p.add_argument(
    "--peak-gflops",
    type=float,
    default=None,
    help="device peak GFLOP/s for MFU on a CPU (GPU peaks are known)",
  )
  p.add_argument("--json", default=None, help="write the results as JSON here")
  args = p.parse_args(argv)
  if args.compile_cache:
    enable_compile_cache(args.compile_cache)
  if args.suite == "gpu":
    # rsjax and PyTorch share one accelerator: JAX must not take 75% of it up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.45")
    from benchmarks import suite

    env = environment(())
    if torch is not None:  # fp32 on GPU: both sides may use TF32 (JAX's default precision)
      env["torch_cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
      env["torch_matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    print("# rsjax GPU certification suite (docs/PERFORMANCE.md)", flush=True)
    for k, v in env.items():
      print(f"#   {k}: {v}")
    return suite.run(args, env, CompileClock())

  names = [m.strip() for m in (args.models or ",".join(SPECS)).split(",") if m.strip()]
  for n in names:
    if n not in SPECS:
      p.error(f"unknown model {n!r}; choose from {sorted(SPECS)}")
  reps = args.reps or (2 if args.quick else 3)
  batch_size = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
  cores = os.cpu_count() or 1
  threads = (
    tuple(dict.fromkeys(int(t) for t in args.threads.split(",")))
    if args.threads
    else tuple(dict.fromkeys((cores, 1)))
  )
  env = environment(threads)
  print("# rsjax throughput benchmark", flush=True)
  for k, v in env.items():
    print(f"#   {k}: {v}")
  if torch is None and not args.no_reference:
    print("#   PyTorch is not installed: no reference (pip install torch)")
  clock = CompileClock()
  results = []
  for name in names:
    spec = SPECS[name]
    num = args.num or (spec.num_quick if args.quick else spec.num_default)
    print(f"# {name} (N = {num}) ...", flush=True)
    res = run_model(
      spec,
      num=num,
      reps=reps,
      batch_size=batch_size,
      reference=not args.no_reference,
      bf16=args.bf16,
      cpu_peak=args.peak_gflops,
      clock=clock,
      threads=threads,
      noise=args.noise,
      log=lambda s: print(s, flush=True),
    )
    results.append(res)
    print(
      "  " + json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}),
      flush=True,
    )
  print()
  print(table(results))
  for r in results:
    goal = GOALS.get(r["model"])
    if goal is not None and "ratio" in r:
      verdict = "met" if r["ratio"] >= goal else "MISSED"
      print(f"goal {r['model']}: >= {goal}x reference: {r['ratio']:.2f}x ({verdict})")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump({"environment": env, "results": results}, f, indent=1)
  return results


if __name__ == "__main__":
  sys.exit(0 if main() else 1)
