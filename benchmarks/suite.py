"""The GPU certification suite (docs/PERFORMANCE.md): rsjax against the tuned PyTorch twin.

``python -m benchmarks.throughput --suite gpu`` runs, on one device and in one
process, Cohen et al.'s CERTIFY (n0 = 100, N = 100,000, alpha = 0.001) for
LeNet, ResNet-20, ResNet-110 (CIFAR) and ResNet-50 (ImageNet size), in float32
and bfloat16, with rsjax and with the tuned PyTorch twin
(``benchmarks.reference_torch.tuned_certify``: same weights, noise made on the
device, large batch, channels-last, bf16 autocast, counting on the device)
and, with ``--twin-compile``, beside it the same twin under ``torch.compile``
(``reference_torch.compiled_twin``: compiled at the certification's batch
sizes first, its compile seconds apart). One warm-up image (compile time), then
``--images`` images (50 by default), rsjax and the twins alternating image by
image. Per model and precision it writes into ``benchmarks/results/gpu.json``
(entries of other models and precisions already there are kept):

* ``samples_per_s`` = (n0 + N) / mean seconds per image, ``seconds_per_image``
  (mean and p50, wall time of one ``certify`` call on one image, host
  statistics included), ``compile_s`` (JAX's trace + lowering + compile events of
  the warm-up image), ``peak_memory_mb`` (device peak so far in the process:
  run one model per command for per-model peaks), for rsjax and for the twin;
  for the compiled twin (``twin_compiled``) also its ``mode``, ``compile_s``
  (``torch.compile`` and one forward per batch size) and the modes that failed;
* ``ratio_to_twin`` = twin seconds per image / rsjax seconds per image, and
  ``ratio_to_twin_compiled`` the same against the compiled twin;
* ``mfu`` = FLOPs per sample (XLA ``cost_analysis``) x samples/s / device peak,
  and ``bound_fraction`` = bound / measured seconds per image, with the bound of
  docs/PERFORMANCE.md: max(FLOPs / peak, 2.5 x conv and dense output elements x
  bytes / HBM bandwidth), peaks 800 TFLOP/s bf16, 60 TFLOP/s fp32 and 3.35 TB/s
  on an H100 (``--device-peaks`` elsewhere);
* the goals (``GOALS``, docs/PERFORMANCE.md) that apply and whether each was met.

The same suite runs on a CPU with a small N (``tests/test_benchmarks_smoke.py``). The peaks and
the bound are in ``rsjax.bench.peaks``, the table and the JSON in ``benchmarks.suite_rows``.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from benchmarks import measure
from benchmarks.suite_rows import ALPHA, PRECISIONS, SIGMA, row_model, table, write_json
from rsjax.bench.costs import op_costs
from rsjax.bench.peaks import bound_seconds, device_peaks

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
    from benchmarks import reference_torch as rt
    from rsjax.bench import torch_models as tm

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
  goal = GOALS.get((name, precision))
  if goal is not None and num == 100_000:
    max_s, min_ratio = goal
    res["goals"].append(
      {
        "goal": f"<= {max_s} s/image",
        "value": rs["seconds_per_image"],
        "met": rs["seconds_per_image"] <= max_s,
      }
    )
    if min_ratio is not None and "ratio_to_twin" in res:
      res["goals"].append(
        {
          "goal": f">= {min_ratio}x the tuned twin",
          "value": res["ratio_to_twin"],
          "met": res["ratio_to_twin"] >= min_ratio,
        }
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
    from benchmarks import reference_torch as rt

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


def run(args, env: dict, clock) -> list[dict]:
  """Runs the suite for the parsed ``throughput`` arguments; prints and writes the results."""
  # "none": only the --dataset-images row.
  models = args.models or ",".join(GPU_MODELS)
  names = [] if models == "none" else [m.strip() for m in models.split(",") if m.strip()]
  precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
  for p in precisions:
    if p not in PRECISIONS:
      raise SystemExit(f"--precisions: unknown precision {p!r}; choose from {sorted(PRECISIONS)}")
  peaks = device_peaks(args.device_peaks)
  num = args.num or 100_000
  batch_size = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
  results = []
  for name in names:
    for precision in precisions:
      print(
        f"# {name} {precision} (n0 = {args.n0}, N = {num}, {args.images} images) ...", flush=True
      )
      results.append(
        run_workload(
          name,
          precision,
          num=num,
          n0=args.n0,
          images=args.images,
          batch_size=batch_size,
          twin=not args.no_reference,
          twin_compile=args.twin_compile,
          peaks=peaks,
          clock=clock,
          fold_bn=args.fold_bn,
          pack=args.pack,
          input_size=args.input_size,
          log=lambda s: print(s, flush=True),
        )
      )
  if args.dataset_images:
    for precision in precisions:
      print(
        f"# {args.dataset_model} {precision}: {args.dataset_images} images, fixed N and budgeted ...",
        flush=True,
      )
      results.append(
        run_dataset_workload(
          args.dataset_model,
          precision,
          num=num,
          n0=args.n0,
          images=args.dataset_images,
          batch_size=batch_size,
          twin=not args.no_reference,
          twin_compile=args.twin_compile,
          log=lambda s: print(s, flush=True),
        )
      )
  print()
  print(table(results))
  for r in results:
    for g in r.get("goals", []):
      print(
        f"goal {r['model']} {r['precision']}: {g['goal']}: {g['value']:.3g} "
        f"({'met' if g['met'] else 'MISSED'})"
      )
  write_json(args.json or DEFAULT_JSON, env, results)
  return results
