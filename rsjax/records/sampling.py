"""What a run record states of its sampling: :class:`RunSampling` (no JAX).

``rsjax.Sampling`` is how the engine samples (its batch size and devices included);
:class:`RunSampling` is the part of it that changes the counts, as the record
(``<file>.run.json``, its ``sampling`` object) and the claim digest hold it, plus the
model's packing. ``rsjax.runs.record.run_sampling`` makes one from an ``rsjax.Sampling``,
``rsjax.Sampling.from_record`` goes back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["RunSampling"]


@dataclasses.dataclass(frozen=True)
class RunSampling:
  """The sampling settings a run claims.

  Attributes:
    n0: selection samples per input.
    n: estimation samples per input (budgeted CERTIFY: the most any input gets).
    alpha: failure probability per input.
    noise: the noise's name (``rsjax.records.spec.NOISE_NORMS``).
    precision: the declared precision of the classifier (``float32``, ``tf32``,
      ``bfloat16``).
    compute_dtype: the dtype that precision runs in (None: the parameters' own).
    pack: samples packed in the channels of the model's narrow stage
      (``rsjax.models.pack_narrow_stage``; 1: none). A model transform, recorded here
      beside the precision, the other choice of how the classifier runs.
  """

  n0: int = 100
  n: int = 100_000
  alpha: float = 0.001
  noise: str = "gaussian"
  precision: str = "float32"
  compute_dtype: str | None = None
  pack: int = 1

  def to_json(self) -> dict:
    """The record's ``sampling`` object (``pack`` only where it is not 1)."""
    out = dataclasses.asdict(self)
    if self.pack == 1:
      del out["pack"]
    return out

  @classmethod
  def from_json(cls, fields: Mapping[str, Any]) -> RunSampling:
    """The value of a record's ``sampling`` object (its entries checked by
    ``rsjax.records.limits.check_record_shape``).

    Raises:
      TypeError: for an entry that is not a field.
    """
    return cls(**fields)
