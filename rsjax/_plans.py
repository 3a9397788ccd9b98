"""The plan builders of the certify methods: ``build(context, **options) -> Plan``.

One builder per method of the registry ``rsjax.methods.METHODS`` (which
declares their options): it refuses, before anything runs, the settings its
method cannot certify, and returns the per-chunk certify function, the extra
result columns and what ``rsjax verify`` needs (``rsjax._method.Plan``). The
method modules are imported on first use, so the registry stays light.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from rsjax._method import Context, Plan

__all__ = ["UNIVERSAL_NOISE_FILE", "cohen_plan", "ddrs_plan", "deq_plan", "idrs_plan",
           "load_universal_noise", "save_universal_noise", "ucan_plan"]

UNIVERSAL_NOISE_FILE = "ucan_noise.npz"  # rsjax.training.ucan.NOISE_FILE, generator "universal"


def _sound_column(cert, j) -> dict:
  return {"sound": int(bool(cert.sound))}



# ----------------------------------------------------------------------------- cohen


def _gaussian_l2(ctx: Context) -> bool:
  from rsjax import noise as noise_lib
  noise = ctx.sampling.noise
  return isinstance(noise, noise_lib.Gaussian) and noise.norm == "l2"


def _binary_gaussian_only(ctx: Context, method: str) -> None:
  """Refuses, before anything runs, what a Gaussian binary-radius method cannot do."""
  if ctx.multiclass:
    raise ValueError(f"--multiclass works with --method cohen or ucan, not {method}")
  if not _gaussian_l2(ctx):
    raise ValueError(f"--method {method} certifies with Gaussian noise only, not --noise "
                     f"{ctx.sampling.noise.name}")


def cohen_plan(ctx: Context, *, grid) -> Plan:
  import rsjax
  if ctx.multiclass and not _gaussian_l2(ctx):
    raise ValueError(f"--multiclass (Cohen et al.'s multiclass L2 radius) works with Gaussian "
                     f"noise only, not --noise {ctx.sampling.noise.name}")
  if grid is not None and ctx.multiclass:
    raise ValueError("--grid (budgeted CERTIFY) works with --method cohen and the binary radius "
                     "only")

  def fn(x, ids):
    return rsjax.certify(ctx.key, ctx.apply_fn, ctx.params, x, sigma=ctx.sigma, ids=ids,
                         num_classes=ctx.dataset.num_classes, settings=ctx.sampling,
                         multiclass=ctx.multiclass, budget=grid)

  what = f"Cohen et al.'s CERTIFY, {ctx.sampling.noise.name} noise, sigma={ctx.sigma}"
  if grid is None:
    return Plan(fn, describe=what)
  # Budgeted inputs stop independently and share launches: certify 16 per call. The
  # schedule (rsjax.engine.budget.Budget's defaults) is part of the run's record.
  from rsjax.engine import budget as budgeted
  b = budgeted.Budget(grid=tuple(grid))
  schedule = {"first": b.first, "ratio": b.ratio, "final_share": b.final_share,
              "stop_alpha": b.stop_alpha}
  return Plan(fn, ("samples",), lambda cert, j: {"samples": int(cert.num_samples[j])},
              describe=f"{what}, budgeted on the radius grid {list(grid)}", inputs_per_call=16,
              details={"budget": schedule})


# ----------------------------------------------------------------------------- idrs


def idrs_plan(ctx: Context, *, idrs_rate, idrs_k, idrs_m) -> Plan:
  from rsjax import idrs
  _binary_gaussian_only(ctx, "idrs")
  name = ctx.dataset.name
  xtr = ctx.load_split("train").arrays()[0] if idrs_rate > 0 else None
  try:
    design = idrs.make_design(xtr, sigma=ctx.sigma, rate=idrs_rate, k=idrs_k, m=idrs_m,
                              dataset=name)
  except ValueError as e:
    raise ValueError(f"{e} (set --idrs-m)") from None

  def fn(x, ids):
    return idrs.certify(ctx.key, ctx.apply_fn, ctx.params, x, design=design, ids=ids,
                        num_classes=ctx.dataset.num_classes, settings=ctx.sampling)

  def record(cert, j):
    return {"sigma": float(cert.sigma[j]), "slack": float(cert.slack[j]), "rate": float(cert.rate)}

  return Plan(fn, ("sigma",), lambda cert, j: {"sigma": repr(float(cert.sigma[j]))},
              describe=f"IDRS, design {design!r}", record=record,
              details=_idrs_details(design))


def _idrs_details(design) -> dict:
  """What ``rsjax verify`` needs of an IDRS design: sigma(x)'s formula and the radius search."""
  from rsjax import idrs
  from rsjax.idrs import _radius
  # The radius search of idrs.certify at its defaults (rtol 1e-4, certified_radius's atol).
  out = {"design": repr(design), "radius_rtol": 1e-4, "radius_atol": 1e-7,
         "xi_margin": _radius.XI_MARGIN,
         "max_noncentrality": _radius.SEARCH_MAX_NONCENTRALITY}
  if isinstance(design, idrs.KnnSigma):
    out.update(kind="knn", sigma_b=design.sigma_b, rate=design.rate, k=design.k, m=design.m,
               eps=design.eps, sigma_min=design.sigma_min, sigma_max=design.sigma_max)
  else:
    out.update(kind="constant", sigma_b=float(design.sigma), rate=0.0)
  return out


# ----------------------------------------------------------------------------- ucan


def save_universal_noise(workdir, *, mu, sigma) -> str:
  """Saves a frozen dataset-wise ``(mu, sigma)`` (UCAN's universal generator) in a workdir.

  ``rsjax certify --method ucan`` certifies with it (``--ucan-sigma auto`` or
  ``dataset``). It is the file ``rsjax.training.ucan.train_ucan`` writes for
  the universal generator (``ucan_noise.npz``, generator ``"universal"``).

  Args:
    workdir: the training workdir of the classifier.
    mu: ``[*input_shape]`` shift.
    sigma: ``[*input_shape]`` scales (> 0), in pixel units (``--sigma`` is not applied).

  Returns:
    The path written.
  """
  from rsjax.anisotropic import FrozenNoise
  from rsjax.training import ucan
  return ucan.save_noise(workdir, FrozenNoise(sigma, mu=mu), "universal")  # checks the arrays


def load_universal_noise(workdir):
  """The noise saved by :func:`save_universal_noise` (or a universal UCAN training), or None.

  Returns:
    ``rsjax.anisotropic.FrozenNoise`` (float32 ``mu``, ``sigma``), or None when
    the workdir holds no frozen noise of the universal generator (none, or a
    pattern's).
  """
  from rsjax.training import ucan
  saved = None if workdir is None else ucan.read_noise(workdir)
  return saved[0] if saved is not None and saved[1] == "universal" else None


def _trained_unsound(workdir) -> bool:
  """Whether ``workdir``'s ``config.json`` marks its training noise as not sound."""
  from rsjax import models
  if not workdir or not os.path.exists(os.path.join(os.fspath(workdir), models.CONFIG_FILE)):
    return False
  return models.read_config(workdir).get("sound", True) is False


def ucan_plan(ctx: Context, *, ucan_sigma, ucan_pattern, ucan_kappa, ucan_iota) -> Plan:
  if ctx.multiclass and not _gaussian_l2(ctx):
    raise ValueError(f"--multiclass works with Gaussian noise only, not --noise "
                     f"{ctx.sampling.noise.name}")
  from rsjax import anisotropic
  shape = tuple(ctx.dataset.input_shape)
  if ucan_sigma == "auto" and _trained_unsound(ctx.workdir):
    raise ValueError("the model was trained with UCAN's input-dependent generator, which gives no "
                     "certificate (rsjax.training.ucan.certify_input_dependent reports its unsound "
                     "numbers); pass --ucan-sigma pattern to certify the classifier with pattern-wise "
                     "noise instead")
  noise = load_universal_noise(ctx.workdir) if ucan_sigma != "pattern" else None
  if ucan_sigma == "dataset" and noise is None:
    raise ValueError(f"--ucan-sigma dataset needs the universal generator's "
                     f"{UNIVERSAL_NOISE_FILE} in the model directory "
                     "(rsjax.methods.save_universal_noise); use --ucan-sigma pattern")
  if noise is not None:
    if noise.sigma.shape != shape:
      raise ValueError(f"{UNIVERSAL_NOISE_FILE} holds sigma of shape {noise.sigma.shape}, the "
                       f"dataset's inputs are {shape}")
    source = "dataset"
    what = (f"dataset-wise (mu, sigma) from {UNIVERSAL_NOISE_FILE} (sigma in "
            f"[{noise.sigma.min():.4g}, {noise.sigma.max():.4g}])")
  else:
    noise = anisotropic.FrozenNoise(ctx.sigma * anisotropic.pattern_sigma(
        shape, pattern=ucan_pattern, kappa=ucan_kappa, iota=ucan_iota))
    source = "pattern"
    what = (f"pattern-wise sigma = {ctx.sigma} * ({ucan_kappa} ||(a, b)||_{ucan_pattern[1:]}^2 + "
            f"{ucan_iota}) in [{noise.sigma.min():.4g}, {noise.sigma.max():.4g}]")

  def fn(x, ids):
    return anisotropic.certify(ctx.key, ctx.apply_fn, ctx.params, x, sigma=noise, ids=ids,
                               num_classes=ctx.dataset.num_classes, settings=ctx.sampling,
                               multiclass=ctx.multiclass)

  def row(cert, j):
    return {"normalized_radius": repr(float(cert.normalized_radius[j])),
            "alm": repr(float(cert.alm[j])), **_sound_column(cert, j)}

  details = _ucan_details(noise, source,
                          sigma=ctx.sigma, pattern=ucan_pattern, kappa=ucan_kappa, iota=ucan_iota)
  return Plan(fn, ("normalized_radius", "alm", "sound"), row,
              describe=f"UCAN, {what}; radius = min(sigma) * normalized_radius", details=details)


def _ucan_details(noise, source: str, **pattern) -> dict:
  """What ``rsjax verify`` needs of UCAN's frozen ``(mu, sigma)``: the scales' minimum
  (radius = min(sigma) R) and geometric mean (alm), fingerprints of both arrays, and
  the pattern's parameters when sigma is a pattern."""
  from rsjax import record
  sig = np.asarray(noise.sigma, np.float32)
  mu = np.zeros_like(sig) if noise.mu is None else np.asarray(noise.mu, np.float32)
  out = {"source": source, "sigma_min": float(sig.min()),
         "sigma_gmean": float(np.exp(np.mean(np.log(sig.astype(np.float64))))),
         "sigma_fingerprint": record.input_fingerprint(sig),
         "mu_fingerprint": record.input_fingerprint(mu)}
  if source == "pattern":
    out.update(pattern)
  return out


# ----------------------------------------------------------------------------- ddrs


def ddrs_plan(ctx: Context, *, ddrs_steps, ddrs_lr, ddrs_draws, ddrs_memory) -> Plan:
  from rsjax import ddrs
  if ctx.sampling.noise.name != "gaussian" or ctx.multiclass:
    raise ValueError("--method ddrs certifies with Gaussian noise and the binary radius only")
  if ddrs_steps < 0 or not ddrs_lr >= 0:
    raise ValueError(f"--ddrs-steps and --ddrs-lr must be >= 0, got {ddrs_steps}, {ddrs_lr}")
  memory = ddrs.MemoryCertifier() if ddrs_memory == "on" else None
  # The sigma optimization draws its noise from its own key, independent of the
  # selection and estimation noise (fold_in(key, 0), fold_in(key, 1)) of CERTIFY.
  key_opt = jax.random.fold_in(ctx.key, 2)

  def fn(x, ids):
    sigma = ddrs.optimize_sigma(key_opt, ctx.apply_fn, ctx.params, x, sigma0=ctx.sigma,
                                steps=ddrs_steps, lr=ddrs_lr, num_samples=ddrs_draws, ids=ids)
    return ddrs.certify(ctx.key, ctx.apply_fn, ctx.params, x, sigma=sigma, ids=ids,
                        num_classes=ctx.dataset.num_classes, memory=memory,
                        settings=ctx.sampling)

  def row(cert, j):
    sound = bool(cert.sound)
    return {"sigma": repr(float(cert.sigma[j])), "predict_mc": int(cert.prediction_mc[j]),
            "radius_mc": repr(float(cert.radius_mc[j])), "sound": int(sound)}

  restore = None
  if memory is not None:

    def restore(x, predict, radius):
      c, r = memory.update_batch(x, predict, radius)
      if np.any(c != predict) or np.any(r != radius):
        raise ValueError("the rows already written do not replay into the DDRS memory (another "
                         "run's rows?); start over with --restart")

  mem = ("then the memory-based step (DDRS Alg. 3) in the dataset's order" if memory is not None
         else "WITHOUT the memory: NOT a certificate")
  return Plan(fn, ("sigma", "predict_mc", "radius_mc", "sound"), row,
              describe=(f"DDRS, sigma optimized per input from {ctx.sigma} ({ddrs_steps} steps, "
                        f"lr {ddrs_lr}, {ddrs_draws} draws), Cohen's CERTIFY at it, {mem}"),
              sequential=memory is not None, restore=restore,
              record=lambda cert, j: {"sigma": float(cert.sigma[j])})


# ----------------------------------------------------------------------------- deq


def deq_plan(ctx: Context, method: str, *, deq_solver, deq_steps, deq_warmup_steps, srs_m,
         srs_check_steps, srs_correction) -> Plan:
  from rsjax import deq
  from rsjax.models import DEQModel, SolverConfig
  _binary_gaussian_only(ctx, method)
  if not isinstance(ctx.model, DEQModel):
    raise ValueError(f"--method {'srs' if method == 'srs' else 'deq-standard'} needs a DEQ model "
                     "(trained with --model deq or mdeq)")
  steps = deq_steps if deq_steps is not None else (3 if method == "srs" else 30)
  if method == "srs":
    # --deq-solver sets the chains; warm-up and check solves use Anderson.
    solver = SolverConfig("anderson", srs_check_steps)
    srs = deq.SRSConfig(solver=SolverConfig(deq_solver, steps),
                        warmup=SolverConfig("anderson", deq_warmup_steps), m=srs_m,
                        correction=srs_correction)
  else:
    solver, srs = SolverConfig(deq_solver, steps), None

  def fn(x, ids):
    return deq.certify(ctx.key, ctx.model, None, x, sigma=ctx.sigma, ids=ids, method=method,
                       solver=solver, srs=srs, num_classes=ctx.dataset.num_classes,
                       settings=ctx.sampling)

  if srs is None:
    return Plan(fn, describe=f"DEQ {method} RS, {steps} {deq_solver} steps per sample")

  def record(cert, j):
    # The two-stage bound is a function of these and the counts (rsjax.deq.srs_p_lower).
    return {"check_class": int(cert.check_class[j]), "m_a": int(cert.check_selected[j]),
            "k": int(cert.check_agree[j]), "m": int(cert.check_total)}

  # The chains (batch_size) change which noise each chain's warm start carries, so the
  # counts: unlike for every other method, the batch size is part of an SRS run.
  details = {"m": srs.m, "correction": srs.correction, "check": srs.check,
             "sound": bool(srs.sound), "chains": ctx.sampling.batch_size}
  return Plan(fn, describe=f"DEQ {method} RS, {steps} {deq_solver} steps per sample",
              record=record, details=details)
