"""Throughput of rsjax's counts engine, side by side with Cohen et al.'s PyTorch loop, and over
forced CPU devices.

:func:`throughput` measures, per model (random weights, one input):

* rsjax (``rsjax.sample_counts`` / ``rsjax.certify``): steady-state samples per second,
  compile time, seconds per certified image (n0 = 100 plus N), the compiled step's memory,
  peak process RSS (CPU) or device memory, FLOPs per forward pass (the jaxpr's,
  ``rsjax.app.bench.costs``) and model-FLOP utilization where the peak is known (``peak_gflops``
  on a CPU);
* the reference (``benchmarks.twins.sample_noise_reference``: Cohen et al.'s ``_sample_noise``,
  float32, batch 400, host counting) on a PyTorch copy of *the same weights* (the logits are
  checked before timing), when PyTorch is installed; and the ratio rsjax / reference;
* with ``bf16``: rsjax with ``compute_dtype=jnp.bfloat16``, its speed and how far its counts are
  from float32's on the same noise.

rsjax and the reference alternate repetition by repetition; the best repetition counts (the
median too). The reference runs at each ``threads`` setting (default: all cores, and 1) and
the fastest counts. Seconds per image at N = 100,000 are *measured* when ``num`` is 100,000,
else *extrapolated* (``t(certify at num) + (100000 - num) / rate``); the output says which.

:func:`scaling`: one fresh process per CPU device count
(``--xla_force_host_platform_device_count=k``) times ``rsjax.sample_counts`` on the same inputs
and key; the engine spreads each input's samples over the devices, so the counts must be
identical for every k (the run fails otherwise).
"""

from __future__ import annotations

import json as jsonlib
import os
import statistics
import subprocess
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
  dump_json,
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

__all__ = ["run_model", "scaling", "throughput"]

N_CERT = 100_000
N0 = 100
SIGMA = 0.25
REF_BATCH = 400  # Cohen et al.'s paper runs (experiments.MD: --batch 400)


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

  def certify_image(seed):
    return rsjax.certify(
      jax.random.key(seed),
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

  # Warm-up (compile) of rsjax: the N program and the n0 program of certify.
  rss_ok = reset_peak_rss()
  clock.total = 0.0
  first, _ = timed(lambda: run_jax(jax.random.key(10_000)))
  cert_first, _ = timed(lambda: certify_image(10_001))
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
    from benchmarks import twins as rt
    from rsjax.app.bench import torch_models as tm

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
  t_cert, _ = timed(lambda: certify_image(20_000))
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


def throughput(
  *,
  models: str | None = None,
  quick: bool = False,
  num: int | None = None,
  reps: int | None = None,
  batch_size: int | str = "auto",
  reference: bool = True,
  bf16: bool = False,
  noise: str = "gaussian",
  threads: str | None = None,
  peak_gflops: float | None = None,
  compile_cache: str | None = None,
  json: str | None = None,
) -> list[dict]:
  """Every model of ``models`` (comma-separated, default all of ``SPECS``) at ``num`` samples
  (default per model, smaller with ``quick``); ``threads``: comma-separated
  ``torch.set_num_threads`` values for the reference (default all cores, and 1); ``noise``:
  rsjax's stream (``gaussian_fast``: threefry13). Prints a table and the goals; writes
  ``json``."""
  if compile_cache:
    enable_compile_cache(compile_cache)
  names = [m.strip() for m in (models or ",".join(SPECS)).split(",") if m.strip()]
  for n in names:
    if n not in SPECS:
      raise SystemExit(f"unknown model {n!r}; choose from {sorted(SPECS)}")
  reps = reps or (2 if quick else 3)
  batch = batch_size if batch_size == "auto" else int(batch_size)
  cores = os.cpu_count() or 1
  tried = [int(t) for t in threads.split(",")] if threads else [cores, 1]
  env = {**environment(), "torch_threads_tried": list(dict.fromkeys(tried))}
  print(f"# rsjax throughput benchmark: {jsonlib.dumps(env)}", flush=True)
  if torch is None and reference:
    print("#   PyTorch is not installed: no reference (pip install torch)")
  clock = CompileClock()
  results = []
  for name in names:
    spec = SPECS[name]
    n = num or (spec.num_quick if quick else spec.num_default)
    print(f"# {name} (N = {n}) ...", flush=True)
    res = run_model(
      spec, num=n, reps=reps, batch_size=batch, reference=reference, bf16=bf16,
      cpu_peak=peak_gflops, clock=clock, threads=tuple(env["torch_threads_tried"]), noise=noise,
      log=lambda s: print(s, flush=True),
    )  # fmt: skip
    results.append(res)
    print(
      "  " + jsonlib.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()})
    )
  print()
  print(table(results))
  for r in results:
    goal = GOALS.get(r["model"])
    if goal is not None and "ratio" in r:
      verdict = "met" if r["ratio"] >= goal else "MISSED"
      print(f"goal {r['model']}: >= {goal}x reference: {r['ratio']:.2f}x ({verdict})")
  dump_json(json, {"environment": env, "results": results})
  return results


def scaling_worker(model: str, num: int, inputs: int, batch_size: int, reps: int) -> None:
  """One device count's run (in its own process): prints its counts and samples/s as JSON."""
  spec = SPECS[model]
  net = models.create_model(
    model, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=0
  )
  apply_fn, variables = models.to_apply_fn(net)
  x = np.random.default_rng(0).random((inputs,) + spec.input_shape, dtype=np.float32)

  def run():
    return rsjax.sample_counts(
      jax.random.key(7), apply_fn, variables, x, sigma=0.25, num_classes=spec.num_classes,
      num=num, batch_size=batch_size,
    )  # fmt: skip

  counts = np.asarray(run())  # compile + warm-up
  best = min(timed(run)[0] for _ in range(reps))
  devices = len(jax.local_devices())
  rate = inputs * num / best
  print(jsonlib.dumps({"devices": devices, "counts": counts.tolist(), "samples_per_s": rate}))


def scaling(
  *,
  model: str = "lenet",
  num: int = 20_000,
  devices: str = "1,2",
  inputs: int = 1,
  batch_size: int = 500,
  reps: int = 2,
  timeout: float = 600.0,
) -> list[dict]:
  """Counts and samples/s over CPU device counts ``devices`` (comma-separated), one process
  each; fails unless the counts are identical."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  res = []
  for k in (int(v) for v in devices.split(",")):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={k}"])
    call = f"scaling_worker({model!r}, {num}, {inputs}, {batch_size}, {reps})"
    code = f"from benchmarks.throughput import scaling_worker; {call}"
    proc = subprocess.run(
      [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
      timeout=timeout, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
      raise RuntimeError(f"worker with {k} devices failed:\n{proc.stderr[-3000:]}")
    res.append(jsonlib.loads(proc.stdout.strip().splitlines()[-1]))
  base, same = res[0]["samples_per_s"], all(r["counts"] == res[0]["counts"] for r in res)
  print(f"# scaling: {model}, {inputs} input(s) x N = {num}, batch {batch_size}")
  print("| CPU devices | samples/s | speed-up | counts identical to 1st |\n|---|---|---|---|")
  for r in res:
    ratio = r["samples_per_s"] / base
    print(
      f"| {r['devices']} | {r['samples_per_s']:.0f} | {ratio:.2f} | {r['counts'] == res[0]['counts']} |"
    )
  print(f"counts identical across device counts: {same}")
  if not same:
    raise SystemExit("counts differ across device counts")
  return res
