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
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

import rsjax
from benchmarks.measure import (
  SPECS,
  CompileClock,
  Spec,
  device_peak_mb,
  enable_compile_cache,
  environment,
  forward_flops,
  peak_gflops,
  peak_rss_mb,
  reset_peak_rss,
  timed,
  torch,
)
from rsjax import models
from rsjax.engine import batching

N_CERT = 100_000
N0 = 100
SIGMA = 0.25
REF_BATCH = 400  # Cohen et al.'s paper runs (experiments.MD: --batch 400)


# ------------------------------------------------------------------------------------------------
# One workload
# ------------------------------------------------------------------------------------------------


def run_model(
  spec: Spec,
  *,
  num: int,
  reps: int,
  batch_size,
  reference: bool,
  bf16: bool,
  cpu_peak: float | None,
  clock: CompileClock,
  threads=(1,),
  seed: int = 0,
  noise: str = "gaussian",
  log=print,
) -> dict:
  """Benchmarks one model; returns a dict of measurements (see the module docstring)."""
  res: dict = {
    "model": spec.name,
    "input_shape": list(spec.input_shape),
    "num_classes": spec.num_classes,
    "num": num,
    "noise": noise,
  }
  model = models.create_model(
    spec.name, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=seed
  )
  apply_fn, variables = models.to_apply_fn(model)
  rng = np.random.default_rng(seed)
  x = rng.random((1,) + spec.input_shape, dtype=np.float32)

  res["flops_per_sample"] = forward_flops(apply_fn, variables, spec.input_shape)
  if batch_size == "auto":
    bs = batching.auto_batch_size(apply_fn, variables, spec.input_shape, num=num)
  else:
    bs = int(batch_size)
  res["batch_size"] = bs
  res["batch_size_mode"] = "auto" if batch_size == "auto" else "fixed"
  probe = batching.probe_step(apply_fn, variables, spec.input_shape, batch=bs)
  res["step_memory_mb"] = (probe.bytes_per_sample * bs + probe.param_bytes) / 2**20
  res["param_mb"] = probe.param_bytes / 2**20

  def run_jax(key, n=num, dtype=None):
    return rsjax.sample_counts(
      key,
      apply_fn,
      variables,
      x,
      sigma=SIGMA,
      num_classes=spec.num_classes,
      num=n,
      batch_size=bs,
      compute_dtype=dtype,
      noise=noise,
    )  # NumPy: already synced

  # Warm-up (compile) of rsjax: the N program and the n0 program of certify.
  rss_ok = reset_peak_rss()
  clock.total = 0.0
  first, _ = timed(lambda: run_jax(jax.random.key(10_000)))
  cert_first, _ = timed(
    lambda: rsjax.certify(
      jax.random.key(10_001),
      apply_fn,
      variables,
      x,
      sigma=SIGMA,
      num_classes=spec.num_classes,
      n0=N0,
      n=num,
      batch_size=bs,
      noise=noise,
    )
  )
  res["compile_s"] = clock.total
  res["first_call_s"] = first
  res["rsjax_peak_rss_mb"] = peak_rss_mb() if rss_ok else None
  res["device_peak_mb"] = device_peak_mb()
  log(
    f"  {spec.name}: batch {bs}, compile {clock.total:.1f} s, "
    f"{res['flops_per_sample'] / 1e6:.2f} MFLOP/sample"
  )

  # Reference: same weights in PyTorch, checked on a noisy batch before timing.
  tmod = None
  if reference and torch is not None:
    from benchmarks import reference_torch as rt
    from benchmarks import torch_models as tm

    tmod = tm.from_flax(model, spec.input_shape)
    xb = np.clip(
      x + SIGMA * rng.standard_normal((8,) + spec.input_shape, dtype=np.float32), -3, 4
    ).astype(np.float32)
    res["logits_check"] = tm.check_same_logits(tmod, apply_fn, variables, xb)
    tx = torch.from_numpy(np.ascontiguousarray(tm.to_torch_layout(x)[0]))
    ref_bs = min(REF_BATCH, num)
    res["reference_batch_size"] = ref_bs

    def run_ref(n=num):
      return rt.sample_noise_reference(
        tmod, tx, n, ref_bs, sigma=SIGMA, num_classes=spec.num_classes
      )

    rss_ok = reset_peak_rss()
    for t in threads:  # warm-up
      torch.set_num_threads(t)
      run_ref(min(num, 2 * ref_bs))
    res["reference_peak_rss_mb"] = peak_rss_mb() if rss_ok else None

  # Steady state, alternating rsjax and the reference (at each thread count).
  t_jax = []
  t_ref = {t: [] for t in threads}
  counts_jax = counts_ref = None
  for r in range(reps):
    dt, c = timed(lambda r=r: run_jax(jax.random.key(r)))
    t_jax.append(dt)
    counts_jax = np.asarray(c)[0]
    if tmod is not None:
      for t in threads:
        torch.set_num_threads(t)
        torch.manual_seed(r)
        dt, counts_ref = timed(run_ref)
        t_ref[t].append(dt)
  res["rsjax_samples_per_s"] = num / min(t_jax)
  res["rsjax_samples_per_s_median"] = num / statistics.median(t_jax)
  res["rsjax_top_fraction"] = float(counts_jax.max() / num)

  # Seconds per certified image.
  t_cert, _ = timed(
    lambda: rsjax.certify(
      jax.random.key(20_000),
      apply_fn,
      variables,
      x,
      sigma=SIGMA,
      num_classes=spec.num_classes,
      n0=N0,
      n=num,
      batch_size=bs,
      noise=noise,
    )
  )
  res["rsjax_certify_s_at_num"] = t_cert
  if num >= N_CERT:
    res["rsjax_s_per_image"] = t_cert * N_CERT / num
    res["s_per_image_kind"] = "measured"
  else:
    res["rsjax_s_per_image"] = t_cert + (N_CERT - num) / res["rsjax_samples_per_s"]
    res["s_per_image_kind"] = f"extrapolated from N={num}"

  gflops = res["flops_per_sample"] * res["rsjax_samples_per_s"] / 1e9
  res["rsjax_gflops"] = gflops
  peak = peak_gflops("float32", cpu_peak)
  res["mfu"] = gflops / peak if peak else None

  if tmod is not None:
    # The reference is credited with its best thread count (PyTorch's OpenMP pool can
    # collapse when other processes load the cores).
    res["reference_samples_per_s_by_threads"] = {str(t): num / min(v) for t, v in t_ref.items()}
    best_t = min(t_ref, key=lambda t: min(t_ref[t]))
    res["reference_threads"] = best_t
    res["reference_samples_per_s"] = num / min(t_ref[best_t])
    res["reference_samples_per_s_median"] = num / statistics.median(t_ref[best_t])
    res["reference_top_fraction"] = float(counts_ref.max() / num)
    torch.set_num_threads(best_t)
    t_n0, _ = timed(
      lambda: rt.sample_noise_reference(
        tmod, tx, N0, REF_BATCH, sigma=SIGMA, num_classes=spec.num_classes
      )
    )
    res["reference_s_per_image"] = t_n0 + N_CERT / res["reference_samples_per_s"]
    res["ratio"] = res["rsjax_samples_per_s"] / res["reference_samples_per_s"]
    res["ratio_median"] = res["rsjax_samples_per_s_median"] / res["reference_samples_per_s_median"]

  if bf16:
    clock.total = 0.0
    c32 = np.asarray(run_jax(jax.random.key(30_000)))[0]
    c16 = np.asarray(run_jax(jax.random.key(30_000), dtype=jnp.bfloat16))[0]
    res["bf16_compile_s"] = clock.total
    t16 = [
      timed(lambda r=r: run_jax(jax.random.key(r), dtype=jnp.bfloat16))[0] for r in range(reps)
    ]
    res["bf16_samples_per_s"] = num / min(t16)
    res["bf16_speedup"] = res["bf16_samples_per_s"] / res["rsjax_samples_per_s"]
    # Same noise, different precision: at least this share of samples changed class.
    res["bf16_changed_fraction_lower_bound"] = float(np.abs(c32 - c16).sum() / 2 / num)
    res["bf16_same_top_class"] = bool(c32.argmax() == c16.argmax())
  return res


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
    "lenet,resnet20,resnet110,resnet50)",
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
    "--twin-compile",
    default="default",
    help="--suite gpu: torch.compile mode of the tuned twin, or 'none'",
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
