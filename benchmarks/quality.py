"""What a precision, a noise or a training objective costs, each beside its baseline in one run.

:func:`precision`: the demo LeNet (``benchmarks.measure.demo_model``) certified in float32 and
with ``compute_dtype=jnp.bfloat16`` on the same test inputs, key and ids, hence the *same*
noise: certified accuracy at a few radii, agreement of the predictions (abstentions included),
radius differences, the share of noisy samples whose class changed (a lower bound from the
counts), the time of each run, and the GPU suite's bf16 criterion
(:func:`certified_accuracy_parity`: within 1 point of fp32's at every radius).

:func:`sound_noise`: sound 8-bit noise (``gaussian_8bit``) against the float Gaussian, side by
side: samples/s of ``rsjax.sample_counts`` on the MLP, LeNet and ResNet-20 (random weights, one
8-bit input, alternating, best repetition; ``sound / float`` below 1: the sound noise is
slower); and the demo LeNet at each sigma certified with both noises (same key, n0 = 100,
alpha 0.001): certified accuracy at radii 0 to 1.

:func:`objectives`: one training step of each objective relative to Gaussian training. Each
trains LeNet on the first ``inputs`` digits for two epochs, the second timed; objectives run in
turn for ``repeats`` rounds, the fastest round counts. The ratio is to Gaussian training with
the same noise draws ``m`` (and to Cohen et al.'s single draw). Expected: MACER and Consistency
about a Gaussian step with the same m; SmoothAdv adds the attack's ``steps`` passes; the sphere
attack up to ``T`` passes (all run under jit, frozen rows masked).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import rsjax
from benchmarks.measure import SPECS, demo_model, dump_json, environment
from rsjax import data, metrics, models, training
from rsjax.app.demo import DEFAULTS

__all__ = ["certified_accuracy_parity", "objectives", "precision", "sound_noise"]

PRECISION_RADII = (0.0, 0.25, 0.5, 0.75)


def certified_accuracy_parity(
  labels, cert_a, cert_b, radii=PRECISION_RADII, max_points: float = 1.0
) -> dict:
  """Statistical parity of two certifications of the same inputs (e.g. fp32 and bf16).

  Args:
    labels: ``[B]`` true classes.
    cert_a: certificate (``prediction``, ``radius``: ``[B]``), e.g. float32.
    cert_b: certificate of the same inputs, e.g. bfloat16.
    radii: radii at which certified accuracy is compared.
    max_points: largest allowed |difference| in percentage points.

  Returns:
    ``{"radii", "accuracy_a", "accuracy_b", "max_abs_diff_points", "within"}``:
    certified accuracies, the largest |difference| over ``radii`` in points and
    whether it is at most ``max_points``.
  """
  labels = np.asarray(labels)
  acc = [
    metrics.certified_accuracy(np.asarray(c.prediction) == labels, c.radius, radii)
    for c in (cert_a, cert_b)
  ]
  diff = float(np.max(np.abs(np.asarray(acc[0]) - np.asarray(acc[1])))) * 100.0
  return {
    "radii": [float(r) for r in radii],
    "accuracy_a": [float(a) for a in acc[0]],
    "accuracy_b": [float(a) for a in acc[1]],
    "max_abs_diff_points": diff,
    "within": diff <= max_points + 1e-9,
  }


def precision(
  *,
  model: str = "lenet",
  sigma: float = 0.25,
  epochs: int = 3,
  images: int = 40,
  n: int = 4000,
  alpha: float = 0.001,
  batch_size: int | str = "auto",
  json: str | None = None,
) -> dict:
  """bfloat16 against float32 certification of ``images`` test digits by the demo ``model``
  trained ``epochs`` at ``sigma`` (lr stepped once, at the end), same key and noise."""
  t = time.perf_counter()
  demo = demo_model(sigma, epochs=epochs, lr_step=max(epochs, 1), model=model)
  train_s = time.perf_counter() - t
  apply_fn, variables = demo.apply_fn, demo.params
  ids = np.linspace(0, len(demo.y_test) - 1, images).astype(np.int64)
  x, y = demo.x_test[ids], demo.y_test[ids]
  clean = float(np.mean(np.asarray(jax.jit(apply_fn)(variables, x)).argmax(1) == y))
  bs = batch_size if batch_size == "auto" else int(batch_size)

  out = {
    "model": model,
    "sigma": sigma,
    "epochs": epochs,
    "train_s": train_s,  # 0 when the cached model was trained before
    "images": images,
    "n": n,
    "alpha": alpha,
    "clean_accuracy": clean,
  }
  certs = {}
  for name, dtype in (("float32", None), ("bfloat16", jnp.bfloat16)):
    kw = dict(
      sigma=sigma,
      num_classes=10,
      n0=100,
      n=n,
      alpha=alpha,
      batch_size=bs,
      ids=ids,
      compute_dtype=dtype,
    )
    rsjax.certify(
      jax.random.key(1), apply_fn, variables, x[:1], **{**kw, "ids": ids[:1]}
    )  # compile
    t = time.perf_counter()
    certs[name] = rsjax.certify(jax.random.key(2), apply_fn, variables, x, **kw)
    out[f"{name}_s"] = time.perf_counter() - t
    acc = metrics.certified_accuracy(
      certs[name].prediction == y, certs[name].radius, PRECISION_RADII
    )
    out[f"{name}_certified_accuracy"] = {
      str(r): float(a) for r, a in zip(PRECISION_RADII, acc, strict=True)
    }
  c32, c16 = certs["float32"], certs["bfloat16"]
  out["prediction_agreement"] = float(np.mean(c32.prediction == c16.prediction))
  out["max_abs_radius_diff"] = float(np.max(np.abs(c32.radius - c16.radius)))
  out["mean_abs_radius_diff"] = float(np.mean(np.abs(c32.radius - c16.radius)))
  out["parity"] = certified_accuracy_parity(y, c32, c16, PRECISION_RADII)
  changed = np.abs(c32.counts.astype(np.int64) - c16.counts).sum(1) / 2 / n
  out["changed_sample_fraction_lower_bound_mean"] = float(changed.mean())
  out["changed_sample_fraction_lower_bound_max"] = float(changed.max())

  print(
    f"# bf16 vs fp32: {model} on mnist5k, sigma {sigma}, {images} test "
    f"inputs, n0 = 100, n = {n}, alpha = {alpha}; clean accuracy {clean:.3f}"
  )
  print("| precision | " + " | ".join(f"cert. acc. r={r}" for r in PRECISION_RADII) + " | time s |")
  print("|---|" + "---|" * (len(PRECISION_RADII) + 1))
  for name in ("float32", "bfloat16"):
    accs = out[f"{name}_certified_accuracy"]
    print(
      f"| {name} | "
      + " | ".join(f"{accs[str(r)]:.3f}" for r in PRECISION_RADII)
      + f" | {out[name + '_s']:.1f} |"
    )
  print(
    f"prediction agreement {out['prediction_agreement']:.3f}; radius |diff| mean "
    f"{out['mean_abs_radius_diff']:.4f}, max {out['max_abs_radius_diff']:.4f}; samples whose "
    f"class changed >= {out['changed_sample_fraction_lower_bound_mean']:.4f} (mean), "
    f"{out['changed_sample_fraction_lower_bound_max']:.4f} (max)"
  )
  par = out["parity"]
  print(
    f"parity: certified accuracy differs by at most {par['max_abs_diff_points']:.2f} points "
    f"({'within' if par['within'] else 'NOT within'} 1 point)"
  )
  dump_json(json, out)
  return out


NOISES = ("gaussian", "gaussian_8bit")
RADII = (0.0, 0.25, 0.5, 0.75, 1.0)


def noise_speed(name: str, num: int, batch: int, reps: int) -> dict:
  """Samples/s of both noises on one random-weight model (alternating, best of ``reps``)."""
  spec = SPECS[name]
  model = models.create_model(name, num_classes=10, input_shape=spec.input_shape, rngs=0)
  apply_fn, params = models.to_apply_fn(model)
  x = (np.random.default_rng(0).integers(0, 256, (1, *spec.input_shape)) / 255).astype(np.float32)

  def run(noise: str) -> float:
    t = time.perf_counter()
    c = rsjax.sample_counts(
      0, apply_fn, params, x, sigma=0.25, num_classes=10, num=num, batch_size=batch, noise=noise
    )
    assert int(np.asarray(c).sum()) == num
    return time.perf_counter() - t

  for noise in NOISES:  # compile
    run(noise)
  times: dict[str, list[float]] = {n: [] for n in NOISES}
  for _ in range(reps):
    for noise in NOISES:
      times[noise].append(run(noise))
  rate = {n: num / min(t) for n, t in times.items()}
  return {
    "model": name,
    "num": num,
    "batch_size": batch,
    "samples_per_s": rate,
    "seconds": times,
    "sound_over_float": rate["gaussian_8bit"] / rate["gaussian"],
  }


def noise_accuracy(sigma: float, epochs: int, skip: int, n: int) -> dict:
  """LeNet trained at ``sigma`` (the demo's settings), certified with both noises."""
  t = time.perf_counter()
  demo = demo_model(sigma, epochs=epochs)
  out: dict = {"sigma": sigma, "epochs": epochs, "train_s": time.perf_counter() - t}
  apply_fn, params = demo.apply_fn, demo.params
  ids = np.arange(0, len(demo.y_test), skip)
  x, y = demo.x_test[ids], demo.y_test[ids]
  out.update(images=len(ids), n=n, n0=100, alpha=0.001)
  for noise in NOISES:
    t = time.perf_counter()
    cert = rsjax.certify(
      jax.random.key(1), apply_fn, params, x, sigma=sigma, num_classes=10, ids=ids,
      n0=100, n=n, alpha=0.001, batch_size=1000, noise=noise,
    )  # fmt: skip
    acc = metrics.certified_accuracy(np.asarray(cert.prediction) == y, cert.radius, RADII)
    out[noise] = {
      "certify_s": time.perf_counter() - t,
      "certified_accuracy": {f"{r:g}": float(a) for r, a in zip(RADII, acc, strict=True)},
      "abstain": float(np.mean(cert.prediction < 0)),
      "counts_short_of_n": int((n - np.asarray(cert.counts).sum(1)).sum()),
    }
  return out


def sound_noise(
  *,
  models: str = "mlp,lenet,resnet20",
  reps: int = 3,
  num: int | None = None,
  sigmas: str = "0.25,0.5",
  epochs: int = DEFAULTS["epochs"],
  skip: int = 10,
  n: int = 1000,
  accuracy: bool = True,
  json: str | None = None,
) -> dict:
  """Speed of both noises on ``models`` (``num`` samples, default per model); with
  ``accuracy``, the demo LeNet at each of ``sigmas`` certified with both on every ``skip``-th
  test digit at ``n`` samples."""
  nums = {"mlp": (20_000, 1000), "lenet": (10_000, 1000), "resnet20": (1_200, 200)}
  out: dict = {"environment": environment(), "speed": [], "accuracy": []}
  print("| model | N | float Gaussian samples/s | sound 8-bit samples/s | sound / float |")
  print("|---|---|---|---|---|")
  for name in [m for m in models.split(",") if m]:
    count, batch = nums.get(name, (SPECS[name].num_quick, 256))
    count = num or count
    r = noise_speed(name, count, batch, reps)
    out["speed"].append(r)
    s = r["samples_per_s"]
    print(
      f"| {name} | {count} | {s['gaussian']:.0f} | {s['gaussian_8bit']:.0f} | "
      f"{r['sound_over_float']:.3f} |",
      flush=True,
    )
  if accuracy:
    print("\n| sigma | noise | " + " | ".join(f"r={r:g}" for r in RADII) + " | certify s |")
    print("|---|---|" + "---|" * (len(RADII) + 1))
    for sigma in (float(v) for v in sigmas.split(",")):
      a = noise_accuracy(sigma, epochs, skip, n)
      out["accuracy"].append(a)
      for noise in NOISES:
        acc = a[noise]["certified_accuracy"]
        print(
          f"| {sigma:g} | {noise} | "
          + " | ".join(f"{acc[f'{r:g}']:.3f}" for r in RADII)
          + f" | {a[noise]['certify_s']:.1f} |",
          flush=True,
        )
  dump_json(json, out)
  return out


def _objectives(m: int) -> dict:
  return {
    "gaussian m=1": training.Gaussian(num_noise=1),
    f"gaussian m={m}": training.Gaussian(num_noise=m),
    f"consistency m={m}": training.Consistency(num_noise=m),
    f"smoothadv m={m}, 2 steps": training.SmoothAdv(num_noise=m, steps=2, warmup=1),
    f"macer m={m}": training.MACER(num_noise=m),
    f"gaussian+sphere attack m={m}, T=4": training.Gaussian(
      num_noise=m, attack=training.SphereAttack(steps=4, step_size=0.25)
    ),
  }


def epoch_seconds(objective, x, y, batch: int) -> float:
  model = models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=0)
  cfg = training.TrainConfig(
    sigma=0.5, epochs=2, batch_size=batch, lr=0.01, objective=objective, drop_last=True
  )
  _, hist = training.train(jax.random.key(0), model, (x, y), cfg, progress=False)
  return float(hist[1]["seconds"])


def objectives(
  *, m: int = 4, batch: int = 64, inputs: int = 1024, repeats: int = 2, json: str | None = None
) -> dict:
  """One epoch of each objective on ``inputs`` digits, ``batch`` inputs a step, ``m`` noise
  draws an input, best of ``repeats`` rounds (see the module docstring)."""
  settings = dict(locals())
  x, y = data.load("mnist5k", "train").arrays()
  x, y = x[:inputs], y[:inputs]
  objs = _objectives(m)
  best = {name: float("inf") for name in objs}
  for r in range(repeats):
    for name, obj in objs.items():
      best[name] = min(best[name], epoch_seconds(obj, x, y, batch))
      print(f"round {r + 1}: {name}: {best[name]:.2f} s/epoch", flush=True)
  base_m = best[f"gaussian m={m}"]
  base_1 = best["gaussian m=1"]
  steps = inputs // batch
  print(
    f"\nLeNet, mnist5k, {inputs} inputs, batch {batch} inputs, {steps} steps/epoch, "
    f"best of {repeats} (device: {jax.devices()[0].platform})"
  )
  print(f"{'objective':38s} {'ms/step':>9s} {'vs gaussian m=' + str(m):>17s} {'vs m=1':>8s}")
  rows = {}
  for name, t in best.items():
    rows[name] = {
      "seconds_per_epoch": t,
      "ms_per_step": 1e3 * t / steps,
      "ratio_vs_gaussian_same_m": t / base_m,
      "ratio_vs_gaussian_m1": t / base_1,
    }
    print(f"{name:38s} {1e3 * t / steps:9.1f} {t / base_m:17.2f} {t / base_1:8.2f}")
  out = {"config": settings, "objectives": rows, "time": time.strftime("%Y-%m-%d %H:%M")}
  dump_json(json, out)
  return out
