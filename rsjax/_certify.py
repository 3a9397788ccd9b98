"""CERTIFY and PREDICT of Cohen et al. for many inputs at once.

Counts come from the device engine (``rsjax._sampling``); the certificate is
computed on the host in float64 (``rsjax.stats``).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from rsjax import noise as noise_lib
from rsjax import stats
from rsjax._sampling import counts_prepared, prepare_inputs, sample_counts
from rsjax.util import as_key, check_alpha, check_int, scale_per_input

__all__ = ["Certificate", "certify", "predict", "ABSTAIN", "certificate_from_counts"]

ABSTAIN = -1


@dataclasses.dataclass(frozen=True)
class Certificate:
  """Certificates of a batch of inputs (NumPy fields).

  Attributes:
    prediction: ``[B]`` int, the certified class, or -1 (abstain).
    radius: ``[B]`` float64 certified radius in ``norm`` (0 on abstain).
    p_lower: ``[B]`` float64 lower confidence bound on the top-class probability.
    counts: ``[B, C]`` int estimation counts (n samples).
    counts_selection: ``[B, C]`` int selection counts (n0 samples).
    norm: the norm of the radius (``"l2"``, ``"l1"``, ``"linf"``).
    guarantee: what the radius guarantees, in words.
  """

  prediction: np.ndarray
  radius: np.ndarray
  p_lower: np.ndarray
  counts: np.ndarray
  counts_selection: np.ndarray | None = None
  norm: str = "l2"
  guarantee: str = ""

  @property
  def abstained(self) -> np.ndarray:
    return self.prediction == ABSTAIN

  def __len__(self) -> int:
    return int(self.prediction.shape[0])


def scale_per_input(sig: np.ndarray) -> tuple[np.ndarray, bool]:
  """Scalar scale per input for the radius: the minimum over dimensions.

  For anisotropic noise ``sigma_i * eps`` the region ``||delta / sigma||_p <= R``
  contains the ball of radius ``min_i sigma_i * R`` (UCAN Corollary 3.3).
  """
  flat = sig.reshape(sig.shape[0], -1).astype(np.float64)
  return flat.min(axis=1), bool(flat.shape[1] > 1 and np.any(flat.max(1) != flat.min(1)))


def certificate_from_counts(counts_selection, counts, *, n, alpha, scale, dim, noise=None,
                            multiclass=False, guarantee=None) -> Certificate:
  """Cohen's certificate from selection and estimation counts (host, float64).

  Args:
    counts_selection: ``[B, C]`` counts of the n0 selection samples.
    counts: ``[B, C]`` counts of the n independent estimation samples.
    n: number of estimation samples.
    alpha: error level.
    scale: ``[B]`` scalar noise scale per input for the radius.
    dim: input dimension (Linf radius of uniform noise).
    noise: noise family.
    multiclass: use Cohen's Theorem 1 with simultaneous bounds instead of the
      binary radius (Gaussian only).
    guarantee: override the description of the guarantee.

  Returns:
    A ``Certificate``.
  """
  noise = noise_lib.get_noise(noise)
  alpha = check_alpha(alpha)
  counts0 = np.asarray(counts_selection)
  counts = np.asarray(counts)
  b = counts.shape[0]
  guess = counts0.argmax(axis=1)
  n_a = counts[np.arange(b), guess]
  if multiclass:
    if noise.norm != "l2" or not isinstance(noise, noise_lib.Gaussian):
      raise ValueError("multiclass=True is available for Gaussian noise (L2) only")
    others = counts[np.arange(counts.shape[1]) != guess[:, None]].reshape(b, -1)
    p_lower, p_upper_b = stats.multiclass_bounds(n_a, others, n, alpha)
    ok = p_lower > p_upper_b
    radius = np.where(ok, stats.multiclass_radius(p_lower, p_upper_b, scale), 0.0)
    desc = "multiclass Gaussian L2 (Cohen Thm 1, simultaneous Clopper-Pearson/Bonferroni bounds)"
  else:
    p_lower = stats.clopper_pearson_lower(n_a, n, alpha)
    ok = p_lower >= 0.5
    radius = np.where(ok & (p_lower > 0.5), noise.radius(p_lower, scale, dim), 0.0)
    desc = f"binary {noise.name} {noise.norm} (Cohen et al. CERTIFY, one-sided Clopper-Pearson)"
  prediction = np.where(ok, guess, ABSTAIN).astype(np.int64)
  return Certificate(
      prediction=prediction,
      radius=np.asarray(radius, np.float64),
      p_lower=np.asarray(p_lower, np.float64),
      counts=counts,
      counts_selection=counts0,
      norm=noise.norm,
      guarantee=guarantee or desc + f"; holds with prob >= 1 - {alpha} per input for the given "
      "sigma held fixed (not a guarantee if sigma was chosen from x: see rsjax.idrs)",
  )


def certify_prepared(key, apply_fn, params, x_np, sig, ids_arr, *, num_classes, n0, n, alpha,
                     batch_size, noise=None, multiclass=False, compute_dtype=None) -> Certificate:
  """CERTIFY on inputs already validated by ``prepare_inputs`` (typed ``key``).

  Method modules that compute sigma themselves (``rsjax.idrs``) call this after
  their own ``prepare_inputs``, so inputs are validated once.
  """
  # fold_in, not split: the same key certifies every chunk of a dataset (the
  # noise is a function of key, input id and sample index), so it is not consumed.
  k_sel, k_est = jax.random.fold_in(key, 0), jax.random.fold_in(key, 1)
  kw = dict(num_classes=num_classes, batch_size=batch_size, noise=noise,
            compute_dtype=compute_dtype)
  c0 = counts_prepared(k_sel, apply_fn, params, x_np, sig, ids_arr, num=n0, **kw)
  c1 = counts_prepared(k_est, apply_fn, params, x_np, sig, ids_arr, num=n, **kw)
  scale, _ = scale_per_input(sig)
  dim = int(np.prod(x_np.shape[1:]))
  return certificate_from_counts(c0, c1, n=n, alpha=alpha, scale=scale, dim=dim, noise=noise,
                                 multiclass=multiclass)


def certify(
    key,
    apply_fn,
    params,
    x,
    *,
    sigma,
    num_classes: int,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    batch_size: int = 1000,
    ids=None,
    noise=None,
    multiclass: bool = False,
    compute_dtype=None,
    budget=None,
) -> Certificate:
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
    n0: selection samples.
    n: estimation samples.
    alpha: failure probability per input.
    batch_size: forward passes per step.
    ids: ``[B]`` dataset indices (reproducible noise per input).
    noise: noise family (default Gaussian, L2).
    multiclass: Cohen's multiclass radius with simultaneous bounds.
    compute_dtype: optional reduced precision for the classifier (see ``sample_counts``).
    budget: a radius grid (``rsjax.budgeted.Budget`` or a sequence of radii):
      budgeted CERTIFY, which stops each input once its certified grid radius
      can no longer change, with at most ``n`` estimation samples and the same
      guarantee (``rsjax.budgeted.certify``; binary radius only).

  Returns:
    ``Certificate`` with NumPy fields (a ``BudgetedCertificate``, which also
    holds ``num_samples``, with ``budget``).

  Raises:
    ValueError: for bad arguments (named in the message).
  """
  if budget is not None:
    if multiclass:
      raise ValueError("budget= gives the binary radius only, not multiclass=True")
    from rsjax import budgeted  # lazy: budgeted builds on this module
    return budgeted.certify(key, apply_fn, params, x, sigma=sigma, num_classes=num_classes,
                            budget=budget, n0=n0, n_max=n, alpha=alpha, batch_size=batch_size,
                            ids=ids, noise=noise, compute_dtype=compute_dtype)
  alpha = check_alpha(alpha)
  n0 = check_int("n0", n0)
  n = check_int("n", n)
  stats.check_sample_size(n, alpha)
  x_np, sig, ids_arr = prepare_inputs(x, sigma, ids)
  cert = certify_prepared(as_key(key), apply_fn, params, x_np, sig, ids_arr,
                          num_classes=num_classes, n0=n0, n=n, alpha=alpha,
                          batch_size=batch_size, noise=noise, multiclass=multiclass,
                          compute_dtype=compute_dtype)
  _, aniso = scale_per_input(sig)
  if aniso:
    cert = dataclasses.replace(
        cert, guarantee=cert.guarantee + "; anisotropic sigma: isotropic radius min(sigma) * R "
        "(UCAN Cor. 3.3; see rsjax.anisotropic for the full region)")
  return cert


def predict(
    key,
    apply_fn,
    params,
    x,
    *,
    sigma,
    num_classes: int,
    n: int = 100_000,
    alpha: float = 0.001,
    batch_size: int = 1000,
    ids=None,
    noise=None,
    compute_dtype=None,
) -> np.ndarray:
  """Cohen et al.'s PREDICT: the top class, or -1 when the two-sided binomial test
  of the top two counts at 1/2 has p-value above ``alpha``.

  Returns:
    ``[B]`` int NumPy array of classes (-1 = abstain).
  """
  alpha = check_alpha(alpha)
  n = check_int("n", n)
  counts = sample_counts(key, apply_fn, params, x, sigma=sigma, num_classes=num_classes, num=n,
                         batch_size=batch_size, ids=ids, noise=noise, compute_dtype=compute_dtype)
  order = np.argsort(-counts, axis=1, kind="stable")
  top = order[:, 0]
  n1 = counts[np.arange(len(top)), top]
  n2 = counts[np.arange(len(top)), order[:, 1]] if counts.shape[1] > 1 else np.zeros_like(n1)
  pval = stats.binomial_test_half(n1, n2)
  return np.where(pval <= alpha, top, ABSTAIN).astype(np.int64)
