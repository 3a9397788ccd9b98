"""One workload of the throughput benchmark (``benchmarks.throughput``): one model measured,
rsjax's counts and certification side by side with the PyTorch reference loop on the same
weights (the figures are listed in ``benchmarks.throughput``'s docstring)."""

from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
import numpy as np

import rsjax
from benchmarks.measure import (
  CompileClock,
  Spec,
  device_peak_mb,
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
    from rsjax.bench import torch_models as tm

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
