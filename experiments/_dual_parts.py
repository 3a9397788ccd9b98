"""The pieces of ``experiments/dual_mnist.py``: training, the estimator's choice of settings
on held-out digits, the comparison rows (IDRS, DDRS) and the inference cost."""

from __future__ import annotations

import os
import time

import numpy as np
from _common import certified_curve, certify_run


def train_model(
  cfg, workdir: str, model_config: dict, data, sigma: float, eval_data, epochs=None, init=None
):
  """A Gaussian-noise model trained (or resumed) in ``workdir`` (``init(model)`` first)."""
  from rsjax import models, training

  m = models.create_model(
    cfg.model,
    num_classes=model_config["num_classes"],
    input_shape=tuple(model_config["input_shape"]),
    rngs=cfg.seed,
    **model_config.get("model_kwargs", {}),
  )
  if init is not None:
    init(m)
  e = epochs or cfg.epochs
  step = cfg.lr_step if epochs is None else max(1, e // 2)
  tc = training.TrainConfig(sigma=sigma, epochs=e, batch_size=cfg.batch_size, lr=cfg.lr,
                            lr_step=step)  # fmt: skip
  m, hist = training.train(cfg.seed, m, data, tc, eval_data=eval_data, workdir=workdir,
                           model_config=model_config, progress=False)  # fmt: skip
  return m, hist


def expert_rows(cfg, train, test, radii, log):
  """Trains the experts (resumed), certifies each with Cohen's CERTIFY at its sigma:
  ``(models, dirs, rows)``."""
  x, y = train.arrays()
  xt, yt = test.arrays()
  cut = len(x) - cfg.validation
  mcfg = cfg.model_config(train.input_shape)
  kw = certify_kw(cfg, test)
  ms, dirs, rows = [], [], {}
  for s in cfg.sigmas:
    d = os.path.join(cfg.out, f"expert_{s:g}")
    m, _ = train_model(cfg, d, mcfg, (x[:cut], y[:cut]), s, (xt, yt))
    ms.append(m)
    dirs.append(d)
    path = os.path.join(cfg.runs, f"cohen_{s:g}.tsv")
    t0 = time.perf_counter()
    certify_run(path, m, d, sigma=s, inputs_per_call=10, **kw)
    rows[f"cohen_{s:g}"] = summary(path, radii, time.perf_counter() - t0)
    log(f"sigma {s:g}: {rows[f'cohen_{s:g}']['certified_accuracy']}")
  return ms, dirs, rows


def summary(path: str, radii, seconds: float | None = None) -> dict:
  """Certified accuracy of the run at ``path`` over ``radii`` (and, for a dual run, how many
  rows chose each sigma index)."""
  from rsjax import metrics
  from rsjax.records import io

  r = io.read_certify(path)
  correct = np.asarray(r.correct, bool)
  out = {
    "certified_accuracy": certified_curve(correct, r.radius, radii, predict=r.predict),
    "acr": float(metrics.average_certified_radius(correct, r.radius, predict=r.predict)),
    "rows": len(r.idx),
  }
  if seconds is not None:
    out["seconds"] = seconds
  if "sigma_index" in r.extra:
    k = np.asarray(r.extra["sigma_index"], np.int64)
    out["chosen"] = {str(i): int((k == i).sum()) for i in sorted(set(k.tolist()) | {-1})}
  return out


def validation_facts(cfg, estimator, sub, sg, hits, xv, alphas, radii, envelope, log) -> dict:
  """The offsets of an estimator (at noise ``sg``, routing to the experts ``sub``) chosen on
  the validation digits ``xv`` (``hits``: all experts' hit shares there), with the predicted
  curves (``rsjax.dual.choose_offsets``) and the objective's ``score``."""
  import jax

  from rsjax import dual

  apply_fn, params = estimator
  key = jax.random.fold_in(jax.random.key(cfg.seed + 7), 1)
  logits = dual.estimator_logits(key, apply_fn, params, xv, sigma=sg, draws=cfg.cal_draws)
  sigmas = [cfg.sigmas[k] for k in sub]
  offsets, f = dual.choose_offsets(logits, hits[list(sub)], sigmas, sigma_estimator=sg, n=cfg.n,
                                   alpha=cfg.alpha, alphas=alphas, radii=radii,
                                   objective=cfg.objective, envelope=envelope)  # fmt: skip
  f["offsets"] = offsets.tolist()
  f["score"] = f["gap"] if cfg.objective == "worst" else -f["shortfall"]
  log(f"estimator {sigmas} at {sg:g}: offsets {offsets.tolist()}, predicted gap {f['gap']:.3f}, "
      f"shortfall {f['shortfall']:.3f}; {np.round(f['dual'], 3).tolist()}")  # fmt: skip
  return f


def certify_kw(cfg, test) -> dict:
  """The settings every certify run of the experiment shares (its digits, N0, N, alpha, seed)."""
  return dict(dataset=test, skip=cfg.skip, n0=cfg.n0, n=cfg.n, alpha=cfg.alpha, seed=cfg.seed)


def comparison_rows(cfg, expert_models, dirs, test, radii, log, prefix: str = "") -> dict:
  """IDRS and DDRS on each expert (the same models and digits), each a verified run named
  ``<prefix>idrs_<sigma>`` (``prefix`` tells other models apart); a method whose options
  in ``cfg`` are None is not run."""
  rows = {}
  kw = certify_kw(cfg, test)
  for s, m, d in zip(cfg.sigmas, expert_models, dirs, strict=True):
    for name, method, options in (
      (prefix + "idrs", "idrs", cfg.idrs),
      (prefix + "ddrs", "ddrs", cfg.ddrs),
    ):
      if options is None:  # not run in this config
        continue
      path = os.path.join(cfg.runs, f"{name}_{s:g}.tsv")
      t0 = time.perf_counter()
      certify_run(path, m, d, sigma=s, method=method, options=options, inputs_per_call=10, **kw)
      rows[f"{name}_{s:g}"] = summary(path, radii, time.perf_counter() - t0)
      log(f"{name} {s:g}: {rows[f'{name}_{s:g}']['certified_accuracy']}")
  return rows


def tuned_rows(cfg, test, sigmas, where, dirs, radii, log) -> dict:
  """Each expert the chosen estimator's rounds fine-tuned, certified alone at its sigma
  (``tuned_<sigma>``): what the extra training gives without the routing."""
  from rsjax import models

  kw = certify_kw(cfg, test)
  rows = {}
  for s, w, d in zip(sigmas, where, dirs, strict=True):
    if w != d:
      path = os.path.join(cfg.runs, f"tuned_{s:g}.tsv")
      t0 = time.perf_counter()
      certify_run(path, models.load_model(w)[0], w, sigma=s, inputs_per_call=10, **kw)
      rows[f"tuned_{s:g}"] = summary(path, radii, time.perf_counter() - t0)
      log(f"fine-tuned sigma {s:g}: {rows[f'tuned_{s:g}']['certified_accuracy']}")
  return rows


def best_of(rows: dict, prefix: str) -> dict:
  """At each radius, the best certified accuracy of the rows named ``prefix_*`` (chosen
  after the fact: no one classifier)."""
  curves = [v["certified_accuracy"] for k, v in rows.items() if k.startswith(prefix + "_")]
  return {r: max(c[r] for c in curves) for r in curves[0]}


def inference_cost(cfg, estimator, experts, sigmas, x, repeats: int = 3) -> dict:
  """Wall time of dual's certificate over one smoothed classifier's (the expert at the
  largest sigma) on the same digits and settings, compiled first; and the forward passes."""
  import jax

  import rsjax
  from rsjax import dual

  s = rsjax.Sampling(n0=cfg.n0, n=cfg.n, alpha=cfg.alpha)
  key = jax.random.key(cfg.seed)
  g_apply, g_params, sigma_g = estimator

  def one():
    e_apply, e_params = experts[-1]
    rsjax.certify(key, e_apply, e_params, x, sigma=sigmas[-1], num_classes=10, settings=s)

  def both():
    dual.certify(key, g_apply, g_params, experts, x, sigmas=sigmas, sigma_estimator=sigma_g,
                 num_classes=10, settings=s)  # fmt: skip

  times = {}
  for name, fn in (("single", one), ("dual", both)):
    fn()  # compile
    t0 = time.perf_counter()
    for _ in range(repeats):
      fn()
    times[name] = (time.perf_counter() - t0) / repeats
  return {
    "forward_passes_ratio": 2.0,
    "wall_seconds": times,
    "wall_ratio": times["dual"] / times["single"],
    "inputs": len(x),
  }


def table(result: dict) -> str:
  """The result's certified accuracies, one row per line (the docstring's numbers)."""
  rows = result["rows"]
  curves = {k: v["certified_accuracy"] for k, v in rows.items() if k.startswith("cohen")}
  curves |= {"envelope": result["envelope"]}
  curves |= {k: v["certified_accuracy"] for k, v in rows.items() if k.startswith("idrs")}
  curves |= {"idrs best": result["best_idrs"]}
  curves |= {k: v["certified_accuracy"] for k, v in rows.items() if k.startswith("ddrs")}
  if "best_ddrs" in result:
    curves["ddrs best"] = result["best_ddrs"]
  curves["dual"] = rows["dual"]["certified_accuracy"]
  curves |= {k: v["certified_accuracy"] for k, v in rows.items() if k.startswith("tuned")}
  curves |= {k: v["certified_accuracy"] for k, v in rows.items() if k.startswith("joint")}
  if "joint_envelope" in result:
    curves["joint best"] = result["joint_envelope"]
  curves |= {k: v["certified_accuracy"] for k, v in rows.items() if k.startswith("dual_")}
  curves |= {f"{k} best": result[f"best_{k}"] for k in ("jidrs", "jddrs") if f"best_{k}" in result}
  if "oracle" in result:
    curves["oracle"] = result["oracle"]
  radii = list(result["envelope"])
  lines = ["r =         " + " ".join(f"{r:>5}" for r in radii)]
  for name, c in curves.items():
    lines.append(f"{name:<12}" + " ".join(f"{c[r]:5.2f}" for r in radii))
  return "\n".join(lines)


def oracle(cfg, radii) -> dict:
  """Per test digit the largest radius any expert certified for its label (chosen after the
  fact from the single-sigma runs): what a perfect, infinitely confident estimator would
  give; an upper bound, no classifier."""
  from rsjax.records import io

  best = None
  for s in cfg.sigmas:
    r = io.read_certify(os.path.join(cfg.runs, f"cohen_{s:g}.tsv"))
    ok = np.asarray(r.correct, bool) & (np.asarray(r.predict) >= 0)
    radius = np.where(ok, np.asarray(r.radius, np.float64), -1.0)
    best = radius if best is None else np.maximum(best, radius)
  assert best is not None
  return {f"{q:g}": float(np.mean(best >= q)) for q in radii}
