"""Settings of the SRS experiment (``srs_deq.py``): its ``Config``, the quick and full runs,
the number of check samples, the names of the compared methods and the registry method and
options (``rsjax.srs.method``) that certify each."""

from __future__ import annotations

import dataclasses

from rsjax import models, srs


@dataclasses.dataclass(frozen=True)
class Config:
  models: tuple = (("deq", (0.25, 0.5)), ("mdeq", (0.25,)))  # (model kind, its sigmas)
  channels: int = 16
  mdeq_channels: tuple[int, int] = (8, 16)  # the MDEQ's two streams (14x14 and 7x7)
  train_steps: int = 8
  epochs: int = 20
  batch: int = 64
  lr: float = 0.05
  jac_weight: float = 2.0
  images_every: int = 5
  n0: int = 100
  n: int = 10_000
  m: int | None = None  # None: the smallest m whose cap reaches cap_sigmas * sigma
  cap_sigmas: float = 2.2
  chains: int = 400
  alpha: float = 0.001
  standard: str = "30A"
  warmup_steps: int = 10
  srs: tuple[str, ...] = ("1A", "3A", "1B", "3B")
  block: int = 10  # images per (model, sigma, method) in one round (all of them progress together)
  share_images: int = 2  # images on which the time share of the check solves is measured
  resnet: bool = False  # also train a ResNet of the DEQ's size (its noisy accuracy)
  train_size: int | None = None  # None: all 4,000 training digits
  seed: int = 0

  def runs(self) -> list[tuple[str, float]]:
    """``(kind, sigma)`` pairs in the order a round visits them."""
    pairs = [(k, s) for k, sigmas in self.models for s in sigmas]
    return sorted(pairs, key=lambda p: (p[1], p[0]))


def get_config(quick: bool = False) -> Config:
  """The settings of one run (the numbers they produced are in the module docstring).

  Commands::

    python experiments/srs_deq.py --quick   # get_config(True): results/srs_deq_quick.json
    python experiments/srs_deq.py --full    # get_config(False): results/srs_deq_full_runs.json

  Args:
    quick: the DEQ at sigma 0.5 only, 5 epochs, 50 images, N = 2,000, m = 200, 100
      chains, SRS-1A and SRS-3A (~15 min on 2 cores) instead of the DEQ at sigma 0.25
      and 0.5 and the MDEQ at 0.25, 20 epochs, 200 images, N = 10,000, m from the
      mismatch budget (744: the smallest m whose cap reaches 2.2 sigma), 400 chains,
      SRS-1A/3A/1B/3B.
  """
  if quick:
    return Config(
      models=(("deq", (0.5,)),),
      epochs=5,
      images_every=20,
      n=2_000,
      m=200,
      chains=100,
      srs=("1A", "3A"),
      resnet=True,
      block=50,
    )
  return Config()


def check_samples(cfg: Config, sigma: float) -> int:
  """The run's number of SRS check samples: ``cfg.m``, or from the mismatch budget."""
  if cfg.m is not None:
    return cfg.m
  return srs.min_check_samples(cfg.cap_sigmas * sigma, cfg.n, cfg.alpha, sigma)


def variant_names(cfg: Config) -> dict[str, str]:
  return {
    v: (f"standard-{v}" if v == cfg.standard else f"SRS-{v}") for v in (cfg.standard, *cfg.srs)
  }


def method_options(cfg: Config, variant: str, m: int) -> tuple[str, dict]:
  """``(method, options)`` of the registry (``rsjax.srs.method``) that certify ``variant``:
  ``deq-standard`` with the standard solver ("30A") from z = 0, or ``srs`` whose chains run
  ``variant`` ("3B": 3 Broyden steps) after a ``warmup_steps`` chunk of the same solver, and
  whose ``m`` check samples are solved with the standard solver (the certified classifier)."""
  full = models.as_solver_config(cfg.standard)
  if variant == cfg.standard:
    return "deq-standard", {"deq_solver": full.name, "deq_steps": full.steps}
  chain = models.as_solver_config(variant)
  return "srs", {
    "deq_solver": chain.name,
    "deq_steps": chain.steps,
    "deq_warmup_solver": chain.name,
    "deq_warmup_steps": cfg.warmup_steps,
    "srs_m": m,
    "srs_check_steps": full.steps,
    "srs_correction": "paper",
  }
