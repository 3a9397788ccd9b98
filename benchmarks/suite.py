"""The GPU certification suite (docs/PERFORMANCE.md): rsjax against the tuned PyTorch twin.

:func:`suite` (``benchmarks/configs/gpu_suite.py``) runs, on one device and in one process,
Cohen et al.'s CERTIFY (n0 = 100, N = 100,000, alpha = 0.001) of LeNet, ResNet-20, ResNet-110 and
ResNet-50 at each precision, with rsjax and the tuned twin (``rsjax.app.bench.twin.tuned_certify``:
same weights, noise made on the device, large batch, channels-last, bf16 autocast, counting on
the device) and, with ``twin_compile``, the twin under ``torch.compile`` (compiled at the
certification's batch sizes first, its compile seconds apart). One warm-up image (compile
time), then ``images`` images, rsjax and the twins alternating image by image. Per model and
precision it merges into ``benchmarks/results/gpu.json``: ``samples_per_s``,
``seconds_per_image`` (mean, p50: one ``certify`` call on one image, host statistics included),
``compile_s`` (JAX's trace, lowering and compile events of the warm-up image),
``peak_memory_mb`` (the process' device peak so far), for rsjax and each twin;
``ratio_to_twin`` (twin s/image over rsjax's) and ``ratio_to_twin_compiled``; ``mfu`` and
``bound_fraction`` (the bound of docs/PERFORMANCE.md, ``rsjax.app.bench.peaks``); and the ``GOALS``
that apply. The table and the JSON are ``benchmarks.measure``'s; the CPU runs it at a small N
(``tests/test_benchmarks_smoke.py``).

:func:`n_scaling`: one image certified at several N (an explicit batch), the fit
``seconds = intercept + slope x N``: the fixed cost of a call against the cost of a sample.
"""

from __future__ import annotations

import json as jsonlib
import os
import statistics
import time

import jax
import numpy as np

from benchmarks import measure
from benchmarks.measure import ALPHA, N0, PRECISIONS, SIGMA, row_model, table, write_json
from rsjax.app.bench import peaks as peaks_of
from rsjax.app.bench.costs import op_costs
from rsjax.app.bench.peaks import bound_seconds

__all__ = ["GOALS", "n_scaling", "run_workload", "suite"]

GPU_MODELS = ("lenet", "resnet20", "resnet110", "resnet50")

DEFAULT_JSON = os.path.join("benchmarks", "results", "gpu.json")

# The suite's goals at N = 100,000 (docs/PERFORMANCE.md): (model, precision) -> (s/image, ratio).
GOALS = {
  ("resnet110", "bf16"): (0.5, 1.5),
  ("resnet110", "fp32"): (1.5, None),
  ("resnet50", "bf16"): (3.0, None),
  ("lenet", "bf16"): (0.02, None),
}


def _summary(times, samples_per_image) -> dict:
  mean = statistics.fmean(times)
  return {
    "seconds_per_image": mean,
    "seconds_per_image_p50": statistics.median(times),
    "samples_per_s": samples_per_image / mean,
    "images": len(times),
  }


def run_workload(
  name: str,
  precision: str,
  *,
  num: int,
  n0: int,
  images: int,
  batch_size,
  twin: bool,
  twin_compile: str,
  peaks: dict | None,
  clock,
  seed: int = 0,
  fold_bn: bool = False,
  pack: int = 1,
  input_size: int | None = None,
  log=print,
) -> dict:
  """Certifies ``images`` random inputs of one model with rsjax and the twins; returns figures."""
  row = row_model(
    name,
    precision,
    num=num,
    batch_size=batch_size,
    seed=seed,
    fold_bn=fold_bn,
    pack=pack,
    input_size=input_size,
    log=log,
  )
  spec, model, apply_fn, variables, bs = (
    row.spec, row.model, row.apply_fn, row.variables, row.batch_size,
  )  # fmt: skip
  xs = np.random.default_rng(seed).random((images + 1,) + spec.input_shape, dtype=np.float32)
  # Per sample, traced on one packed row (a packed model pads a batch of 1 to ``pack``);
  # one trace for both.
  flops, acts = op_costs(apply_fn, variables, spec.input_shape, batch=row.pack)
  flops = float(flops)
  res = {
    "model": name,
    "precision": precision,
    "input_shape": list(spec.input_shape),
    "num_classes": spec.num_classes,
    "n0": n0,
    "num": num,
    "alpha": ALPHA,
    "sigma": SIGMA,
    "batch_size": bs,
    "flops_per_sample": flops,
    "activation_elements_per_sample": acts,
    "fold_bn": fold_bn,
    "pack": row.pack,
  }

  def rsjax_certify(i):
    return row.certify(xs[i : i + 1], [i], n0=n0, num=num)

  clock.total = 0.0
  first, _ = measure.timed(lambda: rsjax_certify(0))  # warm-up image: compiles n0 and N programs
  rs = {"compile_s": clock.total, "first_call_s": first}

  tw = twc = None
  if twin and measure.torch is not None:
    from benchmarks import twins

    rt = twins.tuned()
    from rsjax.app.bench import torch_models as tm

    tw = {"compile": "none"}
    t = time.perf_counter()
    tmod, _ = rt.tuned_module(model, spec.input_shape)
    xb = np.clip(
      xs[:4] + SIGMA * np.random.default_rng(1).standard_normal(xs[:4].shape), 0, 1
    ).astype(np.float32)
    res["logits_check"] = tm.check_same_logits(tmod, apply_fn, variables, xb)

    def twin_certifier(module):
      gen = rt.torch_generator(seed)
      return lambda i: rt.tuned_certify(
        module,
        xs[i],
        n0=n0,
        n=num,
        alpha=ALPHA,
        sigma=SIGMA,
        num_classes=spec.num_classes,
        batch_size=bs,
        autocast_dtype=precision,
        generator=gen,
      )

    twin_certify = twin_certifier(tmod)
    rt.reset_peak_memory()
    twin_certify(0)
    tw["compile_s"] = time.perf_counter() - t  # module set-up, cuDNN autotuning and first image
    if twin_compile != "none":
      twc, compiled_certify = _compiled_twin(
        rt, tmod, spec.input_shape, twin_compile, (min(bs, n0), min(bs, num)), precision
      )
      if compiled_certify is not None:
        compiled_certify = twin_certifier(compiled_certify)
        twc["first_call_s"], _ = measure.timed(lambda: compiled_certify(0))

  log(
    f"  {name} {precision}: batch {bs}, compile {rs['compile_s']:.1f} s, "
    f"{flops / 1e6:.2f} MFLOP/sample"
  )
  t_rs, t_tw, t_twc = [], [], []
  pred_rs, pred_tw, pred_twc = [], [], []
  for i in range(1, images + 1):
    dt, cert = measure.timed(lambda i=i: rsjax_certify(i))
    t_rs.append(dt)
    pred_rs.append(int(cert.prediction[0]))
    if tw is not None:
      dt, (pred, _) = measure.timed(lambda i=i: twin_certify(i))
      t_tw.append(dt)
      pred_tw.append(int(pred))
    if twc is not None and twc["mode"] is not None:
      dt, (pred, _) = measure.timed(lambda i=i: compiled_certify(i))
      t_twc.append(dt)
      pred_twc.append(int(pred))
  rs.update(_summary(t_rs, n0 + num))
  rs["peak_memory_mb"] = measure.device_peak_mb()
  rs["predictions"] = pred_rs
  res["rsjax"] = rs
  if tw is not None:
    tw.update(_summary(t_tw, n0 + num))
    tw["peak_memory_mb"] = rt.peak_memory_mb()
    tw["predictions"] = pred_tw
    res["twin"] = tw
    res["ratio_to_twin"] = tw["seconds_per_image"] / rs["seconds_per_image"]
    res["prediction_agreement"] = float(np.mean(np.asarray(pred_rs) == np.asarray(pred_tw)))
  if twc is not None:
    if t_twc:
      twc.update(_summary(t_twc, n0 + num))
      twc["predictions"] = pred_twc
      res["ratio_to_twin_compiled"] = twc["seconds_per_image"] / rs["seconds_per_image"]
    res["twin_compiled"] = twc

  res["mfu"] = res["bound"] = res["bound_fraction"] = None
  if peaks is not None:
    res["mfu"] = flops * rs["samples_per_s"] / peaks[precision]
    res["bound"] = bound_seconds(flops, acts, precision, peaks, n0 + num)
    res["bound_fraction"] = res["bound"]["bound_s"] / rs["seconds_per_image"]
  res["goals"] = []
  max_s, min_ratio = GOALS.get((name, precision), (None, None))
  if max_s is not None and num == 100_000:
    s = rs["seconds_per_image"]
    res["goals"].append({"goal": f"<= {max_s} s/image", "value": s, "met": s <= max_s})
    if min_ratio is not None and "ratio_to_twin" in res:
      r = res["ratio_to_twin"]
      res["goals"].append(
        {"goal": f">= {min_ratio}x the tuned twin", "value": r, "met": r >= min_ratio}
      )
  return res


def _compiled_twin(rt, module, input_shape, modes, batch_sizes, precision):
  """``reference_torch.compiled_twin``: its figures and its module (None when no mode ran)."""
  out = rt.compiled_twin(
    module, input_shape, modes=modes, batch_sizes=batch_sizes, autocast_dtype=precision
  )
  figures = {k: out[k] for k in ("mode", "compile_s", "tried")}
  return figures, (out["module"] if out["mode"] is not None else None)


def run_dataset_workload(
  name: str,
  precision: str,
  *,
  num: int,
  n0: int,
  images: int,
  batch_size,
  twin: bool,
  twin_compile: str,
  grid=(0.0, 0.25, 0.5, 0.75, 1.0),
  inputs_per_call: int = 16,
  seed: int = 0,
  log=print,
) -> dict:
  """The figure a user cares about: wall time to certify ``images`` test-set-size inputs.

  rsjax certifies them ``inputs_per_call`` at a time (one program per pass over
  all of them), at fixed N and with budgeted CERTIFY on ``grid`` (at most N
  samples per input); the twin certifies one image after another at fixed N (it
  has no budgeted mode; eager, whatever ``twin_compile`` says). Compilation is
  done on a warm-up chunk first.
  """
  row = row_model(name, precision, num=num, batch_size=batch_size, seed=seed)
  spec, model, bs = row.spec, row.model, row.batch_size
  xs = np.random.default_rng(seed + 1).random((images,) + spec.input_shape, dtype=np.float32)

  def certify_all(budget):
    samples = []
    for start in range(0, images, inputs_per_call):
      ids = np.arange(start, min(images, start + inputs_per_call))
      cert = row.certify(xs[ids], ids, n0=n0, num=num, budget=budget)
      samples.extend(getattr(cert, "num_samples", np.full(len(ids), num)).tolist())
    return samples

  warm = xs[: min(images, inputs_per_call)]
  row.certify(warm, None, n0=n0, num=num)  # compile
  row.certify(warm, None, n0=n0, num=num, budget=grid)
  res = {
    "model": name,
    "precision": precision,
    "task": f"dataset{images}",
    "images": images,
    "num": num,
    "n0": n0,
    "batch_size": bs,
    "inputs_per_call": inputs_per_call,
    "grid": list(grid),
    "pack": 1,  # the dataset row certifies the model as built
  }
  res["rsjax_fixed_s"], _ = measure.timed(lambda: certify_all(None))
  res["rsjax_budgeted_s"], samples = measure.timed(lambda: certify_all(grid))
  res["budgeted_mean_samples"] = float(np.mean(samples))
  log(
    f"  {name} {precision}, {images} images: rsjax fixed {res['rsjax_fixed_s']:.1f} s, "
    f"budgeted {res['rsjax_budgeted_s']:.1f} s (mean {res['budgeted_mean_samples']:.0f} samples)"
  )
  if twin and measure.torch is not None:
    from benchmarks import twins

    rt = twins.tuned()

    tmod, _ = rt.tuned_module(model, spec.input_shape)
    gen = rt.torch_generator(seed)
    one = lambda i: rt.tuned_certify(  # noqa: E731
      tmod,
      xs[i],
      n0=n0,
      n=num,
      alpha=ALPHA,
      sigma=SIGMA,
      num_classes=spec.num_classes,
      batch_size=bs,
      autocast_dtype=precision,
      generator=gen,
    )
    one(0)  # compile
    res["twin_fixed_s"], _ = measure.timed(lambda: [one(i) for i in range(images)])
    res["ratio_fixed"] = res["twin_fixed_s"] / res["rsjax_fixed_s"]
    res["ratio_budgeted"] = res["twin_fixed_s"] / res["rsjax_budgeted_s"]
    log(
      f"  twin fixed {res['twin_fixed_s']:.1f} s: rsjax {res['ratio_fixed']:.2f}x fixed, "
      f"{res['ratio_budgeted']:.2f}x budgeted"
    )
  return res


def suite(
  *,
  models: str | None = None,
  precisions: str = "fp32,bf16",
  num: int = 100_000,
  n0: int = N0,
  images: int = 50,
  batch_size: int | str = "auto",
  reference: bool = True,
  twin_compile: str = "none",
  dataset_images: int = 0,
  dataset_model: str = "resnet110",
  fold_bn: bool = False,
  pack: int = 1,
  input_size: int | None = None,
  device_peaks: str | None = None,
  compile_cache: str | None = None,
  json: str = DEFAULT_JSON,
) -> list[dict]:
  """The suite on this device: each of ``models`` (comma-separated, default ``GPU_MODELS``;
  "none": only the dataset row) at each of ``precisions``; ``reference``: the tuned twin beside
  rsjax (``twin_compile``: "none", "auto" or ``torch.compile`` modes, comma-separated, tried in
  order); ``dataset_images``: also certify that many images of ``dataset_model`` at fixed N and
  budgeted; ``fold_bn``/``pack``: rsjax certifies the folded/packed model; ``input_size``:
  square inputs of that size (a small ResNet-50 on a CPU); ``device_peaks``:
  "bf16_tflops,fp32_tflops,hbm_tbps" where the device's are not built in. Prints the table and
  the goals; merges the rows into ``json``."""
  if compile_cache:
    measure.enable_compile_cache(compile_cache)
  # rsjax and PyTorch share one accelerator: JAX must not take 75% of it up front.
  os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.45")
  env = measure.environment()
  print(f"# rsjax GPU certification suite: {jsonlib.dumps(env)}", flush=True)
  clock = measure.CompileClock()
  names = [] if models == "none" else [m for m in (models or ",".join(GPU_MODELS)).split(",") if m]
  precs = [p for p in precisions.split(",") if p]
  for p in precs:
    if p not in PRECISIONS:
      raise SystemExit(f"precisions: unknown precision {p!r}; choose from {sorted(PRECISIONS)}")
  peaks = peaks_of.device_peaks(device_peaks)
  bs = batch_size if batch_size == "auto" else int(batch_size)
  log = lambda s: print(s, flush=True)  # noqa: E731
  results = []
  for name in names:
    for precision in precs:
      print(f"# {name} {precision} (n0 = {n0}, N = {num}, {images} images) ...", flush=True)
      results.append(run_workload(
        name, precision, num=num, n0=n0, images=images, batch_size=bs, twin=reference,
        twin_compile=twin_compile, peaks=peaks, clock=clock, fold_bn=fold_bn, pack=pack,
        input_size=input_size, log=log,
      ))  # fmt: skip
  for precision in precs if dataset_images else ():
    print(f"# {dataset_model} {precision}: {dataset_images} images, fixed N, budgeted", flush=True)
    results.append(run_dataset_workload(
      dataset_model, precision, num=num, n0=n0, images=dataset_images, batch_size=bs,
      twin=reference, twin_compile=twin_compile, log=log,
    ))  # fmt: skip
  print()
  print(table(results))
  for r in results:
    for g in r.get("goals", []):
      met = "met" if g["met"] else "MISSED"
      print(f"goal {r['model']} {r['precision']}: {g['goal']}: {g['value']:.3g} ({met})")
  write_json(json, env, results)
  return results


def fit(nums, seconds) -> dict:
  """Least-squares ``seconds = intercept + slope x N``."""
  slope, intercept = np.polyfit(np.asarray(nums, float), np.asarray(seconds, float), 1)
  return {"intercept_ms": float(intercept) * 1e3, "slope_ns_per_sample": float(slope) * 1e9}


def n_scaling(
  *,
  model: str = "lenet",
  precision: str = "bf16",
  nums: str = "1000,10000,100000",
  n0: int = N0,
  reps: int = 3,
  batch_size: int | str = "auto",
  compile_cache: str | None = None,
  json: str | None = None,
) -> dict:
  """Times ``rsjax.certify`` of one image at each N of ``nums`` (comma-separated, one batch for
  all); writes the rows and the fit to ``json``."""
  if compile_cache:
    measure.enable_compile_cache(compile_cache)
  nums = [int(v) for v in str(nums).split(",")]
  clock, rows = measure.CompileClock(), []
  bs = batch_size if batch_size == "auto" else int(batch_size)
  row = row_model(model, precision, num=max(nums), batch_size=bs)  # one batch for all N
  x = np.random.default_rng(0).random((1,) + row.spec.input_shape, dtype=np.float32)
  for num in nums:
    clock.total = 0.0
    first, _ = measure.timed(lambda num=num: row.certify(x, [0], n0=n0, num=num))
    times = [
      measure.timed(lambda num=num: row.certify(x, [0], n0=n0, num=num))[0] for _ in range(reps)
    ]
    rows.append(
      {
        "num": num,
        "batch_size": row.batch_size,
        "compile_s": clock.total,
        "first_call_s": first,
        "seconds": times,
        "best_s": min(times),
        "median_s": float(np.median(times)),
      }
    )
    print(
      f"{model} {precision} N = {num}: best {min(times) * 1e3:.2f} ms, "
      f"median {np.median(times) * 1e3:.2f} ms, compile {clock.total:.1f} s",
      flush=True,
    )
  out = {
    "model": model,
    "precision": precision,
    "n0": n0,
    "reps": reps,
    "device": str(jax.devices()[0]),
    "rows": rows,
  }
  if len(nums) >= 2:
    out["fit_best"] = fit(nums, [r["best_s"] for r in rows])
    out["fit_median"] = fit(nums, [r["median_s"] for r in rows])
    print(
      f"fit (best): intercept {out['fit_best']['intercept_ms']:.2f} ms, "
      f"slope {out['fit_best']['slope_ns_per_sample']:.2f} ns/sample",
      flush=True,
    )
  measure.dump_json(json, out)
  return out
