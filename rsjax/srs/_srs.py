"""Serialized sampling for DEQs (device): warm-started chains and check samples.

Serialized randomized smoothing (SRS, Gao et al. 2024) draws the ``num``
samples of one input in chunks of ``chains`` samples. Sample ``j`` sits in
chunk ``t = j // chains`` on chain ``c = j % chains``; chunk 0 is a warm-up
(``warmup`` solver from z = 0, e.g. 10 Anderson steps) and every later chunk
starts chain ``c`` at the final state of chain ``c`` in the previous chunk and
runs the cheap ``solver`` (e.g. 1 or 3 Anderson steps). The chain state is the
carry of a ``lax.scan``; every sample is counted, the warm-up chunk included.

The noise of sample ``j`` of the input with id ``i`` is
``fold_in(fold_in(key, i), j)``, as in the core engine (``rsjax.sample_counts``):
the SRS samples are the very samples of standard RS with the same key.

Check samples: ``m`` sample indices per input (``check_idx``) are re-solved from
z = 0 with the full ``check`` solver, which defines the base classifier being
certified. Their SRS labels are recorded during the chain scan, so the pairs
``(SRS label, standard label)`` feed the two-stage certificate
(``rsjax.srs.certify``). ``m`` needs no relation to ``chains``.

Devices: the chains of an input are spread over the local devices
(``jax.shard_map``): a device runs chains ``[d * cpd, (d + 1) * cpd)`` and its
share of the check solves. Each device returns partial results that are
combined on the host (as in the core engine: the program has no collective, so
CPU devices outnumbering cores cannot deadlock). Chain ``c`` sees the same
samples on any number of devices.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from rsjax import noise as noise_lib
from rsjax.engine.counts import check_finite_outputs, prepare_inputs, run_on_devices
from rsjax.engine.driver import Sampling
from rsjax.engine.step import sample_noise
from rsjax.models import SolverConfig, as_solver_config
from rsjax.util import as_key, check_int, local_mesh, num_local_devices, replicate

__all__ = ["SRSConfig", "SRSCounts", "SRSPlan", "make_srs_plan", "srs_sample", "check_indices"]

#: How SRS picks its m check samples: at random or consecutive.
CHECK_MODES = ("random", "consecutive")
#: SRS's correlation correction: the paper's bound, or the authors' code's (no proven guarantee).
CORRECTIONS = ("paper", "authors_code")


@dataclasses.dataclass(frozen=True)
class SRSConfig:
  """Serialized randomized smoothing: the chains, the check samples and the bound.

  Attributes:
    solver: solver of the warm-started chunks ("SRS-3A": 3 Anderson steps).
    warmup: solver of chunk 0 of every chain, from z = 0.
    check_solver: the full solver from z = 0 of the check samples: the base
      classifier being certified ("30A").
    m: check samples per input (any number; >= a few dozen to certify).
    check: check positions, ``"random"`` (sound) or ``"consecutive"`` (the
      authors' code; no guarantee).
    correction: the bound, ``"paper"`` (sound) or ``"authors_code"`` (less
      conservative; reproduces the authors' numbers, no guarantee).
  """

  solver: SolverConfig = SolverConfig("anderson", 3)
  warmup: SolverConfig = SolverConfig("anderson", 10)
  check_solver: SolverConfig = SolverConfig("anderson", 30)
  m: int = 400
  check: str = "random"
  correction: str = "paper"

  def __post_init__(self) -> None:
    for name in ("solver", "warmup", "check_solver"):
      object.__setattr__(self, name, as_solver_config(getattr(self, name)))
    check_int("m", self.m, 0)
    if self.check not in CHECK_MODES:
      raise ValueError(f"check must be one of {CHECK_MODES}, got {self.check!r}")
    if self.correction not in CORRECTIONS:
      raise ValueError(f"correction must be one of {CORRECTIONS}, got {self.correction!r}")

  @property
  def sound(self) -> bool:
    """Whether the certificate is a proven guarantee (the paper's bound at random positions)."""
    return self.correction == "paper" and self.check == "random"

  def replace(self, **kw: Any) -> SRSConfig:
    return dataclasses.replace(self, **kw)


class SRSCounts(NamedTuple):
  """Output of ``srs_sample`` (NumPy arrays).

  Attributes:
    counts: ``[B, C]`` int32 class counts of all ``num`` SRS samples.
    check_idx: ``[B, m]`` int32 sample indices of the check samples.
    srs_labels: ``[B, m]`` int32 SRS labels of the check samples.
    check_labels: ``[B, m]`` int32 labels of the check samples solved from z = 0
      with the full solver.
    residual: ``[B]`` float32 mean relative residual of the SRS solves.
    check_residual: ``[B]`` float32 mean relative residual of the check solves
      (NaN when ``m = 0``).
  """

  counts: jax.Array
  check_idx: jax.Array
  srs_labels: jax.Array
  check_labels: jax.Array
  residual: jax.Array
  check_residual: jax.Array


@dataclasses.dataclass(frozen=True)
class SRSPlan:
  """Static shape of the serialized sampling loop.

  Attributes:
    num: samples per input.
    chains: parallel chains (samples per chunk).
    chunks: ``ceil(num / chains)``.
    devices: devices the chains are spread over.
    m: check samples per input.
    check: ``"random"`` or ``"consecutive"`` check positions.
    check_batch: forward batch of the check solves on one device (the fewest batches of at
      most ``chains`` that cover its share, split evenly: little padding).
  """

  num: int
  chains: int
  chunks: int
  devices: int
  m: int
  check: str
  check_batch: int

  @property
  def chains_per_device(self) -> int:
    return -(-self.chains // self.devices)

  @property
  def check_per_device(self) -> int:
    return -(-self.m // self.devices)

  @property
  def check_steps(self) -> int:
    return -(-self.check_per_device // self.check_batch) if self.m else 0


def make_srs_plan(num: int, chains: int, m: int, devices: int, check: str = "random") -> SRSPlan:
  """Validates and builds an ``SRSPlan`` (``chains`` is capped at ``num``)."""
  for name, v, lo in (("num", num, 1), ("chains", chains, 1), ("m", m, 0), ("devices", devices, 1)):
    check_int(name, v, lo)
  if check not in CHECK_MODES:
    raise ValueError(f"check must be one of {CHECK_MODES}, got {check!r}")
  chains = min(int(chains), int(num))
  if check == "consecutive" and m and chains + m > num:
    raise ValueError(
      f"check='consecutive' takes the m={m} samples after the warm-up chunk ({chains} samples), "
      f"but num={num} < {chains + m}; lower m or use check='random'"
    )
  per_dev = -(-int(m) // int(devices)) if m else 1
  # As few check batches of at most `chains` solves as cover a device's share, of equal size
  # (m = 420 on 400 chains: two batches of 210, not 400 + 20 padded to 400).
  batches = -(-per_dev // chains)
  return SRSPlan(
    num=int(num),
    chains=chains,
    chunks=-(-int(num) // chains),
    devices=int(devices),
    m=int(m),
    check=check,
    check_batch=max(1, -(-per_dev // batches)),
  )


def check_indices(key: jax.Array, input_id: ArrayLike, plan: SRSPlan) -> jax.Array:
  """The ``m`` check sample indices of one input (``[m]`` int32).

  ``"random"``: drawn uniformly **with replacement** from ``[0, num)`` with
  ``fold_in(key, input_id)``, independently of the noise. Given the ``num``
  (SRS label, standard label) pairs, each check draw that has SRS label ``c``
  then has standard label ``c`` with probability exactly
  ``#{SRS = c, DEQ = c} / #{SRS = c}``: the binomial model of the two-stage
  test holds exactly, whatever the dependence between chained samples.
  ``"consecutive"``: samples ``chains .. chains + m - 1`` (the first samples
  after the warm-up chunk, as in the authors' code); no such argument holds.
  """
  if plan.check == "consecutive":
    return plan.chains + jnp.arange(plan.m, dtype=jnp.int32)
  k = jax.random.fold_in(key, input_id)
  return jax.random.randint(k, (plan.m,), 0, plan.num, dtype=jnp.int32)


def _labels(logits):
  """Argmax classes ``[b]`` int32; -1 where the logits are not all finite (counted in no
  class; the host refuses such counts)."""
  ok = jnp.all(jnp.isfinite(logits), axis=-1)
  return jnp.where(ok, jnp.argmax(logits, axis=-1), -1).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class _ChainProgram:
  """What the SRS program runs for every input: the jit's one static argument (hashable).

  Attributes:
    deq_fn: ``deq_fn(params, x, z0, solver) -> (logits [b, C], SolverResult)``.
    plan: the chunks, chains and check samples (:func:`make_srs_plan`).
    noise: the noise family.
    num_classes: C.
    solver: the warm-started chunks' solver.
    warmup: chunk 0's solver, from z = 0.
    check_solver: the check samples' full solver, from z = 0.
  """

  deq_fn: Callable
  plan: SRSPlan
  noise: noise_lib.Noise
  num_classes: int
  solver: SolverConfig
  warmup: SolverConfig
  check_solver: SolverConfig


def _per_input(program: _ChainProgram, params, key, key_check, x, sig, input_id):
  """Counts, check pairs and residuals of one input on this device's chains."""
  deq_fn, plan, num_classes = program.deq_fn, program.plan, program.num_classes
  dev = jax.lax.axis_index("dev")
  cpd = plan.chains_per_device
  shape = x.shape
  chain = dev * cpd + jnp.arange(cpd, dtype=jnp.int32)
  chain_ok = chain < plan.chains

  def noisy(j):
    return x[None] + sig[None] * sample_noise(program.noise, key, input_id, j, shape)

  check_idx = check_indices(key_check, input_id, plan)

  def chunk(t, z0, cfg, carry):
    counts, s_check, res_sum = carry
    j = t * plan.chains + chain
    valid = chain_ok & (j < plan.num)
    logits, res = deq_fn(params, noisy(j), z0, cfg)
    if logits.shape != (cpd, num_classes):
      raise ValueError(
        f"deq_fn returned logits of shape {logits.shape} for a batch of {cpd}; "
        f"expected [{cpd}, num_classes={num_classes}]"
      )
    labels = _labels(logits)
    counts = counts + jnp.sum(
      (labels[:, None] == jnp.arange(num_classes)) & valid[:, None], axis=0, dtype=jnp.int32
    )
    res_sum = res_sum + jnp.sum(jnp.where(valid, res.residual, 0.0))
    if plan.m:
      local = check_idx - t * plan.chains - dev * cpd
      hit = (local >= 0) & (local < cpd)
      local = jnp.clip(local, 0, cpd - 1)
      hit = hit & valid[local]
      s_check = jnp.where(hit, labels[local], s_check)
    return res.z, (counts, s_check, res_sum)

  carry = (
    jnp.zeros((num_classes,), jnp.int32),
    jnp.full((plan.m,), -1, jnp.int32),
    jnp.float32(0.0),
  )
  z, carry = chunk(0, None, program.warmup, carry)
  if plan.chunks > 1:

    def body(state, t):
      z, carry = state
      return chunk(t, z, program.solver, carry), None

    (z, carry), _ = jax.lax.scan(body, (z, carry), jnp.arange(1, plan.chunks, dtype=jnp.int32))
  counts, s_check, res_sum = carry

  t_check = jnp.full((plan.m,), -1, jnp.int32)
  chk_sum = jnp.float32(0.0)
  if plan.m:
    cb = plan.check_batch

    def check_step(carry, s):
      t_check, chk_sum = carry
      p = dev * plan.check_per_device + s * cb + jnp.arange(cb, dtype=jnp.int32)
      ok = (p < plan.m) & (p < (dev + 1) * plan.check_per_device)
      p = jnp.minimum(p, plan.m - 1)
      logits, res = deq_fn(params, noisy(check_idx[p]), None, program.check_solver)
      labels = _labels(logits)
      # Scatter this step's labels; padding rows write nothing.
      t_check = t_check.at[jnp.where(ok, p, plan.m)].set(labels, mode="drop")
      chk_sum = chk_sum + jnp.sum(jnp.where(ok, res.residual, 0.0))
      return (t_check, chk_sum), None

    (t_check, chk_sum), _ = jax.lax.scan(
      check_step, (t_check, chk_sum), jnp.arange(plan.check_steps, dtype=jnp.int32)
    )
  # Partial results of this device; combined on the host.
  return counts, check_idx, s_check, t_check, res_sum, chk_sum


@functools.partial(jax.jit, static_argnames=("program", "mesh"))
def _srs_jit(key, key_check, params, x, sig, ids, *, program: _ChainProgram, mesh):
  def per_device(key, key_check, params, x, sig, ids):
    def one(args):
      xi, si, ii = args
      return _per_input(program, params, key, key_check, xi, si, ii)

    out = jax.lax.map(one, (x, sig, ids))
    return jax.tree.map(lambda a: a[None], out)

  return run_on_devices(per_device, mesh, key, key_check, params, x, sig, ids)


def srs_sample(
  key: jax.Array,
  deq_fn: Callable,
  params: Any,
  x: ArrayLike,
  *,
  sigma: ArrayLike,
  num_classes: int,
  num: int,
  config: SRSConfig | None = None,
  settings: Sampling | None = None,
  check_key: jax.Array | None = None,
  ids: ArrayLike | None = None,
) -> SRSCounts:
  """Serialized (warm-started) Monte Carlo counts of a DEQ, with check samples.

  Args:
    key: PRNG key of the noise (sample ``j`` of input ``ids[i]`` uses
      ``fold_in(fold_in(key, ids[i]), j)``).
    deq_fn: ``deq_fn(params, x, z0, solver) -> (logits [b, C], SolverResult)``;
      ``z0=None`` means z = 0 (see ``rsjax.models.DEQForward``). Hashable.
    params: pytree passed to ``deq_fn``.
    x: ``[B, *input_shape]`` inputs in [0, 1].
    sigma: float, ``[B]`` or ``[B, *input_shape]`` noise scale.
    num_classes: C.
    num: samples per input.
    config: an :class:`SRSConfig`: the chain, warm-up and check solvers, the
      number ``m`` of check samples per input (0: none) and their positions.
    settings: an ``rsjax.Sampling``: ``batch_size`` is the number of parallel
      chains (samples per chunk), and ``noise`` and ``devices`` (the local
      devices the chains are spread over) are used.
    check_key: key of the random check positions (required when ``m > 0`` and
      ``check="random"``; must be independent of ``key``).
    ids: ``[B]`` dataset indices (default positions in ``x``).

  Returns:
    ``SRSCounts`` of NumPy arrays.
  """
  config = SRSConfig() if config is None else config
  settings = Sampling() if settings is None else settings
  chains, noise = settings.fixed_batch("DEQ certification"), settings.noise
  if noise.lattice:
    raise ValueError(
      f"noise {noise.name}: SRS chains add sigma * eps in float; the sound 8-bit noise is "
      "drawn on the grid by the counts engine only (rsjax.certify, deq.StandardRS)"
    )
  num_classes = check_int("num_classes", num_classes)
  key = as_key(key)
  x_np, sig, ids_arr = prepare_inputs(x, sigma, ids)
  ndev = num_local_devices(settings.devices)
  plan = make_srs_plan(num, chains, config.m, ndev, config.check)
  if plan.m and plan.check == "random":
    if check_key is None:
      raise ValueError("check_key is required for m > 0 with check='random'")
    check_key = as_key(check_key)
  else:
    check_key = jax.random.key(0)  # unused
  mesh = local_mesh(ndev)
  # Everything enters replicated over the mesh, as in the core engine.
  key, check_key, params, x_np, sig, ids_arr = replicate(
    mesh, (key, check_key, params, x_np, sig, ids_arr)
  )
  program = _ChainProgram(
    deq_fn, plan, noise, num_classes, config.solver, config.warmup, config.check_solver
  )
  out = _srs_jit(key, check_key, params, x_np, sig, ids_arr, program=program, mesh=mesh)
  counts, check_idx, s_check, t_check, res_sum, chk_sum = jax.device_get(out)
  # Samples with non-finite logits were counted in no class; every check sample has a label.
  num_bad = plan.num - counts.sum(axis=(0, 2)) + (t_check.max(0) < 0).sum(axis=1)
  check_finite_outputs(num_bad, np.asarray(ids_arr), plan.num)
  none = np.full(counts.shape[1], np.nan, np.float32)  # m = 0: no check samples
  chk_mean = (chk_sum.sum(0) / plan.m).astype(np.float32) if plan.m else none
  return SRSCounts(
    counts=counts.sum(0, dtype=np.int64).astype(np.int32),
    check_idx=check_idx[0],
    srs_labels=s_check.max(0),
    check_labels=t_check.max(0),
    residual=(res_sum.sum(0) / plan.num).astype(np.float32),
    check_residual=chk_mean,
  )
