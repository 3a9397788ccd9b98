"""DDRS's CERTIFY at per-input optimized sigma, then the memory (the certifier :class:`DDRS`
of ``rsjax.certify`` and :func:`certify`, its alias). A dataset run is ``--method ddrs``
(``rsjax.ddrs.METHOD`` through ``rsjax.app.launch.run``): one result file, a run that
``rsjax verify`` checks."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rsjax.cohen._certify import Batch, Cohen, certify_with
from rsjax.ddrs._memory import MemoryCertifier
from rsjax.engine.counts import prepare_inputs
from rsjax.engine.driver import Certificate
from rsjax.runs.method import Certifier, Context
from rsjax.util import as_key

if TYPE_CHECKING:
  from jax.typing import ArrayLike

__all__ = ["DDRSCertificate", "certify", "DDRS"]

_NOT_A_CERTIFICATE = (
  "NOT A CERTIFICATE of a fixed classifier: Cohen's radius (binary, one-sided "
  "Clopper-Pearson) at a sigma optimized for each input (DDRS); the smoothed classifier changes "
  "with sigma, so the radius is not sound for any fixed smoothed classifier (Súkeník et al., "
  "IDRS App. C). Use the memory (DDRS memory-based guarantee) or rsjax.idrs for a sound "
  "input-dependent certificate"
)
_MEMORY_GUARANTEE = (
  "DDRS memory-based guarantee (Alfarra et al. 2022, Algorithm 3): Cohen's radius (binary "
  "Gaussian L2, one-sided Clopper-Pearson) at the per-input optimized sigma, post-processed so "
  "that certified balls of different classes never intersect; valid only for this deployment "
  "run and this input order (the memory's earlier inputs), not a certificate of a fixed "
  "smoothed classifier"
)


@dataclasses.dataclass(frozen=True)
class DDRSCertificate(Certificate):
  """A ``Certificate`` at per-input optimized sigma, optionally after the memory.

  Attributes:
    sigma: ``[B]`` float64 sigma used at each input.
    prediction_mc: ``[B]`` Monte-Carlo prediction before the memory.
    radius_mc: ``[B]`` Monte-Carlo radius before the memory.
    memory_used: whether a ``MemoryCertifier`` post-processed the result.
  """

  sigma: np.ndarray | None = None
  prediction_mc: np.ndarray | None = None
  radius_mc: np.ndarray | None = None
  memory_used: bool = False

  columns: ClassVar[tuple[str, ...]] = ("sigma", "predict_mc", "radius_mc", "sound")

  def row_fields(self, j: int) -> dict:
    return {
      "sigma": repr(float(self.sigma[j])),
      "predict_mc": int(self.prediction_mc[j]),
      "radius_mc": repr(float(self.radius_mc[j])),
      "sound": int(bool(self.sound)),
    }

  def record_fields(self, j: int) -> dict:
    return {"sigma": float(self.sigma[j])}


@dataclasses.dataclass(frozen=True)
class DDRS(Certifier):
  """DDRS (Alfarra et al. 2022) as a certifier of ``rsjax.certify``: Cohen's CERTIFY at
  per-input sigma (``sigma``: ``[B]``, e.g. from ``optimize_sigma``; DDRS's
  ``certify_ds``), then the optional memory. ``--method ddrs`` (``rsjax.ddrs.METHOD``)
  optimizes each input's sigma first (``ascent``) and, with ``--ddrs-memory on``, runs the
  chunks in the dataset's order (``restore`` replays the rows already written).

  Attributes:
    memory: a ``MemoryCertifier`` (updated in place, in the inputs' order), or
      None: Cohen's radius at the optimized sigma, NOT a certificate.
    ascent: ``optimize_sigma``'s keywords (``steps``, ``lr``, ``num_samples``): the batch's
      ``sigma`` is sigma0 and each input's sigma is optimized from it, on the key
      ``fold_in(key, 2)`` (independent of CERTIFY's ``fold_in(key, 0)`` and
      ``fold_in(key, 1)``); None: the batch's ``sigma`` is the ``[B]`` per-input sigma.
  """

  memory: MemoryCertifier | None = None
  ascent: dict | None = None

  columns: ClassVar[tuple[str, ...]] = DDRSCertificate.columns

  @classmethod
  def from_options(
    cls, ctx: Context, *, ddrs_steps: int, ddrs_lr: float, ddrs_draws: int, ddrs_memory: str
  ) -> DDRS:
    if ddrs_steps < 0 or not ddrs_lr >= 0:
      raise ValueError(f"--ddrs-steps and --ddrs-lr must be >= 0, got {ddrs_steps}, {ddrs_lr}")
    memory = MemoryCertifier() if ddrs_memory == "on" else None
    return cls(memory, {"steps": ddrs_steps, "lr": ddrs_lr, "num_samples": ddrs_draws})

  @property
  def sequential(self) -> bool:  # type: ignore[override]
    return self.memory is not None

  def describe(self, ctx: Context) -> str:
    a = self.ascent or {}
    mem = (
      "then the memory-based step (DDRS Alg. 3) in the dataset's order"
      if self.memory is not None
      else "WITHOUT the memory: NOT a certificate"
    )
    return (
      f"DDRS, sigma optimized per input from {ctx.sigma} ({a.get('steps')} steps, "
      f"lr {a.get('lr')}, {a.get('num_samples')} draws), Cohen's CERTIFY at it, {mem}"
    )

  def restore(self, x: Any, predict: Any, radius: Any) -> None:
    if self.memory is None:
      raise ValueError("DDRS without its memory keeps no state to restore")
    c, r = self.memory.update_batch(x, predict, radius)
    if np.any(c != predict) or np.any(r != radius):
      raise ValueError(
        "the rows already written do not replay into the DDRS memory (another "
        "run's rows?); start over with --restart"
      )

  def certify(self, batch: Batch) -> DDRSCertificate:
    """Certifies a batch at its per-input sigma, then passes it through the memory.

    Args:
      batch: the inputs ``x [B, *input_shape]``, classifier and settings (an
        ``rsjax.cohen.Batch``; selection and estimation keys ``fold_in(key, 0)`` /
        ``fold_in(key, 1)``, as Cohen's). Its ``sigma`` is ``[B]`` per-input sigma; its
        settings' noise is Gaussian (L2) or ``"uniform"`` (the L1 variant: sigma is the
        half-width lambda, radius ``2 lambda (p_A_lower - 1/2)``, Yang et al.). The memory
        needs Gaussian noise (it works with L2 balls).

    Returns:
      ``DDRSCertificate``; ``guarantee`` says what (little) it guarantees, and
      ``sound`` is True only with the memory (its deployment-run guarantee).

    Raises:
      ValueError: for bad arguments.
    """
    settings = batch.settings
    if self.ascent is not None:
      batch = batch.replace(sigma=self._optimized(batch))
    x_np, _, _ = prepare_inputs(batch.x, 1.0, batch.ids)
    sig = np.asarray(batch.sigma, np.float32)
    if sig.shape != (x_np.shape[0],):
      raise ValueError(f"sigma must have shape [B]={(x_np.shape[0],)}, got {sig.shape}")
    if self.memory is not None and not isinstance(self.memory, MemoryCertifier):
      raise ValueError(f"memory must be a MemoryCertifier or None, got {self.memory!r}")
    if self.memory is not None and settings.noise.norm != "l2":
      raise ValueError("the memory works with L2 balls: use Gaussian noise (noise=None) with it")
    base = Cohen().certify(batch.replace(x=x_np, sigma=sig))
    pred, rad = base.prediction, base.radius
    if self.memory is None:
      guarantee = _NOT_A_CERTIFICATE + f" (alpha={settings.alpha}, {settings.noise.name} noise)"
    else:
      pred, rad = self.memory.update_batch(x_np, pred, rad)
      guarantee = _MEMORY_GUARANTEE + f" (alpha={settings.alpha} per input)"
    return DDRSCertificate.from_base(
      base,
      prediction=np.asarray(pred, np.int64),
      radius=np.asarray(rad, np.float64),
      guarantee=guarantee,
      sound=self.memory is not None,
      sigma=sig.astype(np.float64),
      prediction_mc=base.prediction,
      radius_mc=base.radius,
      memory_used=self.memory is not None,
    )

  def _optimized(self, batch: Batch) -> np.ndarray:
    """``[B]`` sigma of each input optimized from the batch's sigma0 (``ascent``)."""
    import jax

    from rsjax.ddrs._sigma import optimize_sigma

    key_opt = jax.random.fold_in(as_key(batch.key), 2)
    return optimize_sigma(
      key_opt,
      batch.apply_fn,
      batch.params,
      batch.x,
      sigma0=batch.sigma,
      ids=batch.ids,
      precision=batch.settings.precision,
      **self.ascent,
    )


def _ddrs(sigma: ArrayLike, memory: MemoryCertifier | None = None) -> tuple[DDRS, ArrayLike]:
  """``certify(..., sigma=, memory=None)``: ``DDRS(memory)`` at the per-input ``sigma``."""
  return DDRS(memory), sigma


#: ``rsjax.certify(key, apply_fn, params, x, sigma=sigma, certifier=DDRS(memory), ...)`` as
#: ``certify(key, apply_fn, params, x, sigma=, memory=None, ...)``: see :class:`DDRS`.
certify = functools.partial(certify_with, _ddrs)
