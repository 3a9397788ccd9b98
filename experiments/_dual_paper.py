"""Dual randomized smoothing the paper's way on the embedded MNIST
(``python experiments/dual_mnist.py --quick --paper``; ``docs/DUAL.md``): one classifier
fine-tuned for every candidate sigma, sigma estimators at sigma_g 1.0 trained by
``rsjax.dual.paper`` with the paper's parts added one at a time, each predicted on the
validation digits and the chosen ones certified with ``--method dual``, beside Cohen, IDRS
and DDRS on the experts."""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
from _common import RESULTS, ROOT, certify_run, load_splits, repo_path
from _dual_parts import (
  best_of,
  certify_kw,
  comparison_rows,
  expert_rows,
  inference_cost,
  oracle,
  summary,
)


def paper_config(base, quick: bool):
  """``python experiments/dual_mnist.py --quick --paper``: the paper's recipe on the same
  LeNet experts and digits (:func:`run_paper`): one classifier fine-tuned for all three sigmas,
  estimators at sigma_g 1.0 on soft targets (100 draws), with the consistency term and
  rebalancing added one at a time, N 10,000 (``base``: the MNIST config)."""
  name = "dual_paper" if quick else "dual_paper_full"
  return dataclasses.replace(
    base,
    sigmas=(0.25, 0.5, 1.0),  # 0.12 left out: it certifies nothing past r 0.25 here
    paper=True,
    candidates=(),
    estimator_epochs=15 if quick else 90,
    rounds=1,
    expert_epochs=0,
    skip=20 if quick else 2,  # 50 test digits: N 10,000 on 2 shared CPU cores
    n=10_000,
    cost_inputs=10,
    cost_repeats=1,
    variants=("hard", "soft", "soft_consistency", "paper"),
    certified_variants=("hard", "paper"),  # the time of N 10,000 on shared cores
    out=os.path.join(ROOT, "runs", name),
    runs=os.path.join(RESULTS, name),
    results=os.path.join(RESULTS, name),
  )


def train_joint(cfg, workdir: str, model_config: dict, data, init, eval_data):
  """One classifier for all of ``cfg.sigmas`` (``rsjax.dual.paper.CandidateSigma``: each
  input's noise drawn from them at every step), fine-tuned ``cfg.joint_epochs`` from
  ``init(model)`` at ``cfg.joint_lr`` (resumed in ``workdir``)."""
  from rsjax import models, training
  from rsjax.dual.paper import CandidateSigma

  m = models.create_model(cfg.model, num_classes=10, input_shape=tuple(model_config["input_shape"]),
                          rngs=cfg.seed)  # fmt: skip
  init(m)
  tc = training.TrainConfig(sigma=max(cfg.sigmas), epochs=cfg.joint_epochs,
                            batch_size=cfg.batch_size, lr=cfg.joint_lr,
                            lr_step=max(1, cfg.joint_epochs // 2),
                            batch_sigma=CandidateSigma(tuple(cfg.sigmas)))  # fmt: skip
  return training.train(cfg.seed, m, data, tc, eval_data=eval_data, workdir=workdir,
                        model_config=model_config, progress=False)  # fmt: skip


#: The estimator variants of the paper run: (targets, consistency, rebalance), each adding a
#: part of the paper's recipe to the one before.
PAPER_VARIANTS = {
  "hard": ("hard", False, False),
  "soft": ("soft", False, False),
  "soft_consistency": ("soft", True, False),
  "paper": ("soft", True, True),
}


def paper_estimator(cfg, workdir: str, est_cfg: dict, x, targets, variant: str, init):
  """The estimator of ``variant`` (:data:`PAPER_VARIANTS`) trained by
  ``rsjax.dual.paper.train_estimator`` at ``cfg.sigma_g`` from ``init(model)``, saved in
  ``workdir`` (loaded when it holds this very config): ``(model, history)``."""
  import json

  import jax

  from rsjax import models
  from rsjax.dual import paper

  form, consistency, rebalance = PAPER_VARIANTS[variant]
  recipe = paper.EstimatorRecipe(epochs=cfg.estimator_epochs, lr=cfg.estimator_lr,
                                 consistency=consistency, rebalance=rebalance)  # fmt: skip
  config = {**est_cfg, "sigma": cfg.sigma_g, "dual_target": form,
            "dual_recipe": {"variant": variant, **vars(recipe)}}  # fmt: skip
  if os.path.exists(workdir) and models.read_config(workdir) == config:
    with open(os.path.join(workdir, "paper_history.json")) as f:
      return models.load_model(workdir)[0], json.load(f)
  m = models.create_model(cfg.model, num_classes=est_cfg["num_classes"],
                          input_shape=tuple(est_cfg["input_shape"]), rngs=cfg.seed)  # fmt: skip
  init(m)
  m, hist = paper.train_estimator(jax.random.key(cfg.seed + 31), m, x, targets[form],
                                  sigma=cfg.sigma_g, recipe=recipe)  # fmt: skip
  if os.path.exists(workdir):
    import shutil

    shutil.rmtree(workdir)
  models.save_model(workdir, m, config)
  with open(os.path.join(workdir, "paper_history.json"), "w") as f:
    json.dump(hist, f)
  return m, hist


def predicted_curve(cfg, estimator, sigmas, hits_v, xv, radii) -> dict:
  """What an estimator (no offsets) is predicted to certify on the validation digits:
  its choices' shares, the predicted certified accuracy at ``radii`` and its mean vote
  share (``rsjax.dual.predicted_radii`` from ``cfg.cal_draws`` noisy passes)."""
  import jax

  from rsjax import dual

  apply_fn, params = estimator
  key = jax.random.fold_in(jax.random.key(cfg.seed + 7), 1)
  logits = dual.estimator_logits(key, apply_fn, params, xv, sigma=cfg.sigma_g,
                                 draws=cfg.cal_draws)  # fmt: skip
  alphas = dual.split_alpha(cfg.alpha, 0.5)
  r = dual.predicted_radii(logits, np.zeros(len(sigmas)), hits_v, sigmas,
                           sigma_estimator=cfg.sigma_g, n=cfg.n, alphas=alphas)  # fmt: skip
  votes = np.argmax(logits, axis=-1)
  share = (votes[..., None] == np.arange(len(sigmas))).mean(axis=1)
  choice = np.argmax(share, axis=1)
  return {
    "chosen": {f"{s:g}": float(np.mean(choice == k)) for k, s in enumerate(sigmas)},
    "top_share": float(np.mean(share.max(axis=1))),
    "predicted": [float(v) for v in dual.certified(r, np.asarray(radii))],
  }


def joint_rows(cfg, train, test, init_model, radii, log):
  """The one classifier for every sigma (fine-tuned from ``init_model``), certified with
  Cohen's CERTIFY at each sigma: ``(model, dir, rows)``."""
  from rsjax.dual.training import init_from

  x, y = train.arrays()
  cut = len(x) - cfg.validation
  d = os.path.join(cfg.out, "joint")
  m, _ = train_joint(cfg, d, cfg.model_config(train.input_shape), (x[:cut], y[:cut]),
                     lambda mm: init_from(mm, init_model), None)  # fmt: skip
  rows = {}
  for s in cfg.sigmas:
    path = os.path.join(cfg.runs, f"joint_{s:g}.tsv")
    t0 = time.perf_counter()
    certify_run(path, m, d, sigma=s, inputs_per_call=10, **certify_kw(cfg, test))
    rows[f"joint_{s:g}"] = summary(path, radii, time.perf_counter() - t0)
    log(f"joint at {s:g}: {rows[f'joint_{s:g}']['certified_accuracy']}")
  return m, d, rows


def paper_estimators(cfg, train, test, joint, joint_dir, radii, log):
  """Each of ``cfg.variants`` trained on the one classifier's targets at ``cfg.sigma_g``
  (from the classifier's features), predicted on the validation digits and certified with
  ``--method dual`` (that classifier at every sigma): ``(rows, facts)``."""
  import jax

  from rsjax import models
  from rsjax.dual import paper
  from rsjax.dual.training import expert_hits, init_from, targets_from_hits

  paper.check_sigma_g(cfg.sigma_g, cfg.sigmas)
  x, y = train.arrays()
  cut = len(x) - cfg.validation
  fns = [models.to_apply_fn(joint)] * len(cfg.sigmas)
  t0 = time.perf_counter()
  hits = expert_hits(jax.random.key(cfg.seed), fns, cfg.sigmas, x[:cut], y[:cut],
                     draws=cfg.soft_draws)  # fmt: skip
  hits_v = expert_hits(jax.random.fold_in(jax.random.key(cfg.seed + 7), 0), fns, cfg.sigmas,
                       x[cut:], y[cut:], draws=cfg.cal_draws)  # fmt: skip
  k = len(cfg.sigmas)
  soft = paper.soft_targets(hits, cfg.sigmas, draws=cfg.soft_draws, temperature=cfg.temperature)
  hard = targets_from_hits(hits, cfg.sigmas, draws=cfg.soft_draws, rule="confident", tau=1.0)
  targets = {"soft": soft, "hard": paper.hard_soft_targets(hard, k)}
  facts = {
    "hits_seconds": time.perf_counter() - t0,
    "soft_mean": {f"{s:g}": float(soft[:, i].mean()) for i, s in enumerate(cfg.sigmas)},
    "soft_best": {f"{s:g}": float(np.mean(soft.argmax(1) == i)) for i, s in enumerate(cfg.sigmas)},
    "hard": {f"{s:g}": float(np.mean(hard == i)) for i, s in enumerate(cfg.sigmas)},
    "validation": {},
  }
  log(f"targets: {facts['soft_best']} (soft argmax), {facts['hard']} (hard)")
  est_cfg = {**cfg.model_config(train.input_shape), "num_classes": k,
             "dual_sigmas": list(cfg.sigmas)}  # fmt: skip
  spec = ",".join(f"{s:g}:{repo_path(joint_dir)}" for s in cfg.sigmas)
  rows = {}
  for v in cfg.variants:
    d = os.path.join(cfg.out, f"estimator_{v}_at{cfg.sigma_g:g}")
    t0 = time.perf_counter()
    m, hist = paper_estimator(cfg, d, est_cfg, x[:cut], targets, v,
                              lambda mm: init_from(mm, joint))  # fmt: skip
    f = predicted_curve(cfg, models.to_apply_fn(m), cfg.sigmas, hits_v, x[cut:], radii)
    facts["validation"][v] = f | {"last_epoch": hist[-1], "seconds": time.perf_counter() - t0}
    log(f"estimator {v}: {f}")
    if v not in cfg.certified_variants:
      continue
    path = os.path.join(cfg.runs, f"dual_{v}.tsv")
    t0 = time.perf_counter()
    certify_run(path, m, d, sigma=cfg.sigma_g, method="dual", inputs_per_call=10,
                options={"dual_experts": spec}, **certify_kw(cfg, test))  # fmt: skip
    rows[f"dual_{v}"] = summary(path, radii, time.perf_counter() - t0)
    log(f"dual {v}: {rows[f'dual_{v}']}")
  return rows, facts


def run_paper(cfg, radii, log=print) -> dict:
  """The paper's way (:func:`paper_config`): the experts and their Cohen rows, the one
  classifier (Cohen at each sigma), the estimator variants (each a dual run), IDRS and DDRS
  on the experts and on the one classifier (``jidrs_*``, ``jddrs_*``); ``rows["dual"]`` is
  the full recipe's."""
  from rsjax import models

  t_all = time.perf_counter()
  train, test, _ = load_splits(cfg.dataset, cfg.skip)
  os.makedirs(cfg.out, exist_ok=True)
  os.makedirs(cfg.runs, exist_ok=True)
  ms, dirs, rows = expert_rows(cfg, train, test, radii, log)
  joint, joint_dir, more = joint_rows(cfg, train, test, ms[cfg.sigmas.index(0.5)], radii, log)
  rows |= more
  more, facts = paper_estimators(cfg, train, test, joint, joint_dir, radii, log)
  rows |= more
  rows["dual"] = rows[f"dual_{cfg.variants[-1]}"]
  rows |= comparison_rows(cfg, ms, dirs, test, radii, log)
  k = len(cfg.sigmas)  # IDRS and DDRS on the one classifier too: the same network as dual's
  rows |= comparison_rows(cfg, [joint] * k, [joint_dir] * k, test, radii, log, prefix="j")
  est = models.load_model(os.path.join(cfg.out, f"estimator_{cfg.variants[-1]}_at{cfg.sigma_g:g}"))
  xt = test.arrays()[0][:: cfg.skip][: cfg.cost_inputs]
  fns = [models.to_apply_fn(joint)] * len(cfg.sigmas)
  cost = inference_cost(cfg, (*models.to_apply_fn(est[0]), cfg.sigma_g), fns, list(cfg.sigmas),
                        xt, cfg.cost_repeats)  # fmt: skip
  return dict(
    config=dataclasses.asdict(cfg) | {"out": repo_path(cfg.out), "runs": repo_path(cfg.runs),
                                      "results": repo_path(cfg.results)},
    rows=rows,
    envelope=best_of(rows, "cohen"),
    joint_envelope=best_of(rows, "joint"),
    best_idrs=best_of(rows, "idrs"),
    best_ddrs=best_of(rows, "ddrs"),
    best_jidrs=best_of(rows, "jidrs"),
    best_jddrs=best_of(rows, "jddrs"),
    oracle=oracle(cfg, radii),
    estimator=facts,
    cost=cost,
    seconds={"total": time.perf_counter() - t_all},
  )  # fmt: skip
