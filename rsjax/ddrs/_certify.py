"""DDRS's CERTIFY at per-input optimized sigma, then the memory (the certifier :class:`DDRS`
of ``rsjax.certify`` and :func:`certify`, its alias). A dataset run is ``--method ddrs``
(``rsjax.ddrs.METHOD`` through ``rsjax.app.launch.run``): one result file, a run that
``rsjax verify`` checks."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from rsjax.cohen._certify import Batch, Cohen, certify_with
from rsjax.ddrs._memory import MemoryCertifier
from rsjax.engine.counts import prepare_inputs
from rsjax.engine.driver import Certificate

if TYPE_CHECKING:
  from jax.typing import ArrayLike

__all__ = [
  "DDRSCertificate",
  "certify",
  "DDRS",
]

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
class DDRS:
  """DDRS (Alfarra et al. 2022) as a certifier of ``rsjax.certify``: Cohen's CERTIFY at
  per-input sigma (``sigma``: ``[B]``, e.g. from ``optimize_sigma``; DDRS's
  ``certify_ds``), then the optional memory.

  Attributes:
    memory: a ``MemoryCertifier`` (updated in place, in the inputs' order), or
      None: Cohen's radius at the optimized sigma, NOT a certificate.
  """

  memory: MemoryCertifier | None = None

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
    return DDRSCertificate(
      prediction=np.asarray(pred, np.int64),
      radius=np.asarray(rad, np.float64),
      p_lower=base.p_lower,
      counts=base.counts,
      counts_selection=base.counts_selection,
      norm=base.norm,
      guarantee=guarantee,
      sound=self.memory is not None,
      sigma=sig.astype(np.float64),
      prediction_mc=base.prediction,
      radius_mc=base.radius,
      memory_used=self.memory is not None,
    )


def _ddrs(sigma: ArrayLike, memory: MemoryCertifier | None = None) -> tuple[DDRS, ArrayLike]:
  """``certify(..., sigma=, memory=None)``: ``DDRS(memory)`` at the per-input ``sigma``."""
  return DDRS(memory), sigma


#: ``rsjax.certify(key, apply_fn, params, x, sigma=sigma, certifier=DDRS(memory), ...)`` as
#: ``certify(key, apply_fn, params, x, sigma=, memory=None, ...)``: see :class:`DDRS`.
certify = functools.partial(certify_with, _ddrs)
