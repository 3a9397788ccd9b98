"""CERTIFY and PREDICT of Cohen et al. for many inputs at once (``rsjax.certify``,
``rsjax.predict``).

Cohen's CERTIFY is the driver (``rsjax.engine.driver.run_certify``) run on the
engine's counts with Cohen's certificate rule (``cohen_passes``), under the
sampling rule its caller picks: fixed ``n0`` and ``n`` by default, budgeted
CERTIFY's ``rsjax.engine.budget.Budget`` with ``budget=``.
"""

from __future__ import annotations

import numpy as np

from rsjax.engine import budget as budgeted
from rsjax import stats
from rsjax.engine.driver import ABSTAIN, Certificate, Sampling, cohen_passes, run_certify
from rsjax.engine.counts import sample_counts
from rsjax.engine.traced import refuse_traced

__all__ = ["certify", "predict"]


def certify(key, apply_fn, params, x, *, sigma, num_classes: int, settings: Sampling | None = None,
            ids=None, multiclass: bool = False, budget=None, **sampling) -> Certificate:
  """Cohen et al.'s CERTIFY for a batch of inputs.

  Selection (``n0`` samples) and estimation (``n`` samples) use independent keys
  (``fold_in(key, 0)`` and ``fold_in(key, 1)``); the top class of the selection counts is certified
  with the one-sided Clopper-Pearson bound of its estimation count.

  Args:
    key: ``jax.random.key`` or int seed.
    apply_fn: ``apply_fn(params, x) -> logits``.
    params: pytree for ``apply_fn``.
    x: ``[B, *input_shape]`` inputs.
    sigma: float, ``[B]`` or ``[B, *input_shape]`` noise scale.
    num_classes: number of classes C.
    settings: a :class:`Sampling` (``n0``, ``n``, ``alpha``, ``batch_size``,
      ``noise``, ``compute_dtype``, ``devices``; default ``Sampling()``).
    ids: ``[B]`` dataset indices (reproducible noise per input).
    multiclass: Cohen's multiclass radius with simultaneous bounds.
    budget: a radius grid (``rsjax.engine.budget.Budget`` or a sequence of radii):
      budgeted CERTIFY, which stops each input once its certified grid radius
      can no longer change, with at most ``n`` estimation samples and the same
      guarantee (the sampling rule ``Budget``; binary radius only).
    **sampling: fields of :class:`Sampling` given as keywords (``n0=100,
      n=100_000, alpha=0.001, batch_size=1000, noise=None, ...``); they override
      ``settings``.

  Returns:
    ``Certificate`` with NumPy fields (a ``BudgetedCertificate``, which also
    holds ``num_samples``, with ``budget``).

  Raises:
    ValueError: for bad arguments (named in the message).
  """
  refuse_traced("rsjax.certify", key, params, x, sigma, ids)
  settings = Sampling.of(settings, **sampling)
  rule = None
  if budget is not None:
    if multiclass:
      raise ValueError("budget= gives the binary radius only, not multiclass=True")
    rule = budgeted.as_budget(budget)
  counts, certificate = cohen_passes(apply_fn, params, x, sigma, ids, num_classes=num_classes,
                                     settings=settings, multiclass=multiclass)
  return run_certify(key, counts, certificate, settings, sampling_rule=rule)


def predict(key, apply_fn, params, x, *, sigma, num_classes: int, settings: Sampling | None = None,
            ids=None, **sampling) -> np.ndarray:
  """Cohen et al.'s PREDICT: the top class, or -1 when the two-sided binomial test
  of the top two counts at 1/2 has p-value above ``alpha``.

  Uses ``n`` samples (key ``key`` itself), ``alpha``, ``batch_size``, ``noise``,
  ``precision`` and ``devices`` of the settings (``settings`` and/or the
  same keywords as :func:`certify`).

  Returns:
    ``[B]`` int NumPy array of classes (-1 = abstain).
  """
  refuse_traced("rsjax.predict", key, params, x, sigma, ids)
  s = Sampling.of(settings, **sampling)
  counts = sample_counts(key, apply_fn, params, x, sigma=sigma, num_classes=num_classes, num=s.n,
                         batch_size=s.batch_size, ids=ids, noise=s.noise,
                         precision=s.precision, devices=s.devices)
  order = np.argsort(-counts, axis=1, kind="stable")
  top = order[:, 0]
  n1 = counts[np.arange(len(top)), top]
  n2 = counts[np.arange(len(top)), order[:, 1]] if counts.shape[1] > 1 else np.zeros_like(n1)
  pval = stats.binomial_test_half(n1, n2)
  return np.where(pval <= s.alpha, top, ABSTAIN).astype(np.int64)
