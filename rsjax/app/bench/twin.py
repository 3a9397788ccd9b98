"""The tuned PyTorch twin of an ``rsjax.models`` model: the baseline ``rsjax bench --twin``
and the repository's GPU suite time rsjax against (docs/PERFORMANCE.md).

The same network with the same weights (:mod:`rsjax.app.bench.torch_models`), on the fastest
PyTorch path we know: noise drawn on the device and added by broadcasting (no ``repeat``),
one large batch, channels-last memory format, optional TF32 or bfloat16 autocast, counting
on the device (``scatter_add_``, no host sync until the counts are read), cuDNN autotuning
(:func:`tuned_module`, :func:`tuned_counts`, :func:`tuned_certify`); and that twin under
``torch.compile`` (:func:`compiled_twin`: static shapes, compiled at the certification's
batch sizes before any timing, so its compile time is reported apart). :func:`time_twin`
times both as ``rsjax bench`` timed rsjax (in rounds, :mod:`rsjax.app.bench.rounds`), at rsjax's
batch and over the batches of rsjax's sweep (:func:`sweep_counts`), for each side's best.

PyTorch is optional (``pip install torch``): only ``rsjax bench --twin`` imports this module.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import numpy as np
import torch
from torch import nn

from rsjax.app.bench import rounds, sweep
from rsjax.app.bench.sweep import CHUNKS, point_samples
from rsjax.app.bench.torch_models import check_same_logits, from_flax, to_torch_layout

__all__ = [
  "AUTOCAST",
  "COMPILED_SWEEP_POINTS",
  "COMPILE_MODES",
  "compiled_twin",
  "peak_memory_mb",
  "reset_peak_memory",
  "sweep_counts",
  "time_twin",
  "torch_device",
  "torch_generator",
  "tuned_certify",
  "tuned_counts",
  "tuned_module",
]

#: ``torch.compile`` modes, the one expected fastest on a GPU first: ``compiled_twin``'s
#: ``"auto"`` takes the first of them that compiles and runs.
COMPILE_MODES = ("max-autotune-no-cudagraphs", "reduce-overhead", "default")
#: Batches the compiled twin is swept at (each one compiled): the eager twin's best ones.
COMPILED_SWEEP_POINTS = 3


def torch_device() -> torch.device:
  """The first CUDA device when there is one, else the CPU."""
  return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def torch_generator(seed: int) -> torch.Generator:
  return torch.Generator(device=torch_device()).manual_seed(int(seed))


def reset_peak_memory() -> None:
  if torch.cuda.is_available():
    torch.cuda.reset_peak_memory_stats()


def peak_memory_mb() -> float | None:
  """Peak CUDA memory allocated by PyTorch since the last reset (None on a CPU)."""
  return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None


def tuned_module(model, input_shape, *, compile_mode: str = "none") -> tuple[nn.Module, str]:
  """The PyTorch twin of an ``rsjax.models`` model, set up for speed on :func:`torch_device`.

  Args:
    model: an NNX model from ``rsjax.models``.
    input_shape: shape of one input as rsjax sees it (``(H, W, C)``).
    compile_mode: ``"none"`` or a ``torch.compile`` mode (``"default"``,
      ``"reduce-overhead"``, ``"max-autotune"``, ...).

  Returns:
    ``(module, compile)``: the module (channels-last for images) and the compile
    mode in effect (``"none (Error)"`` when ``torch.compile`` is unavailable).
  """
  dev = torch_device()
  mod = from_flax(model, input_shape).to(dev)
  if len(input_shape) == 3:
    mod = mod.to(memory_format=torch.channels_last)
  if dev.type == "cuda":
    torch.backends.cudnn.benchmark = True
  if compile_mode == "none":
    return mod, "none"
  try:
    compiled = torch.compile(mod, mode=None if compile_mode == "default" else compile_mode)
    with torch.inference_mode():  # compile errors surface on the first call
      compiled(torch.stack(2 * [_torch_input(np.zeros(input_shape), dev)]))
  except Exception as e:  # noqa: BLE001 - no compiler toolchain: eager is the twin
    return mod, f"none ({type(e).__name__})"
  return compiled, compile_mode


def _forward_context(dev: torch.device, autocast_dtype: str) -> contextlib.ExitStack:
  """The twin's forward settings: inference mode, TF32 on or off, bf16 autocast or not."""
  tf32 = autocast_dtype == "tf32"
  torch.backends.cuda.matmul.allow_tf32 = tf32
  torch.backends.cudnn.allow_tf32 = tf32
  stack = contextlib.ExitStack()
  stack.enter_context(torch.inference_mode())
  stack.enter_context(
    torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast_dtype == "bf16")
  )
  return stack


def _torch_input(x: np.ndarray, dev: torch.device) -> torch.Tensor:
  """One input in rsjax's layout (``[H, W, C]``) as the twin's tensor (``[C, H, W]``)."""
  xt = torch.from_numpy(np.ascontiguousarray(to_torch_layout(np.asarray(x, np.float32)[None])))
  return xt[0].to(dev)


def _noisy_batch(xt: torch.Tensor, noise: torch.Tensor, sigma: float) -> torch.Tensor:
  """``xt + sigma * noise``, channels-last for images (the layout every forward sees)."""
  batch = torch.addcmul(xt, noise, torch.tensor(sigma, device=xt.device))
  if xt.dim() == 3:
    batch = batch.contiguous(memory_format=torch.channels_last)
  return batch


def _compile_once(module, mode, input_shape, batch_sizes, autocast_dtype) -> nn.Module:
  """``torch.compile(module)`` in ``mode``, run once at each batch size as ``tuned_counts`` runs."""
  dev = next(module.parameters()).device
  compiled = torch.compile(module, mode=None if mode == "default" else mode, dynamic=False)
  xt = _torch_input(np.zeros(tuple(input_shape), np.float32), dev)
  with _forward_context(dev, autocast_dtype):
    for b in dict.fromkeys(int(v) for v in batch_sizes):
      compiled(_noisy_batch(xt, torch.zeros((b,) + tuple(xt.shape), device=dev), 0.25)).argmax(1)
  if dev.type == "cuda":
    torch.cuda.synchronize(dev)
  return compiled


def compiled_twin(
  module: nn.Module,
  input_shape,
  *,
  modes="auto",
  batch_sizes=(2,),
  autocast_dtype: str = "fp32",
) -> dict:
  """The twin under ``torch.compile``: the first of ``modes`` that compiles and runs.

  Each mode is compiled with static shapes (``dynamic=False``) and run once at
  every batch size of ``batch_sizes`` under the settings of
  :func:`tuned_counts` (inference mode, autocast, channels-last), so that the
  certification that follows does not compile again.

  Args:
    module: the eager twin from :func:`tuned_module` (``compile_mode="none"``).
    input_shape: shape of one input as rsjax sees it (``(H, W, C)``).
    modes: ``"auto"`` (:data:`COMPILE_MODES`), a comma-separated string or a
      sequence of ``torch.compile`` modes, tried in order.
    batch_sizes: the forward batches the certification will use.
    autocast_dtype: as in :func:`tuned_counts`.

  Returns:
    ``{"module", "mode", "compile_s", "tried"}``: the compiled module and its mode
    (``None`` and ``module`` itself when no mode ran), the seconds of the
    successful compile and warm-up, and the error of each mode that failed.
  """
  if modes == "auto":
    modes = COMPILE_MODES
  elif isinstance(modes, str):
    modes = tuple(m.strip() for m in modes.split(",") if m.strip())
  tried = {}
  out = {"module": module, "mode": None, "compile_s": None, "tried": tried}
  for mode in modes:
    t = time.perf_counter()
    try:
      compiled = _compile_once(module, mode, input_shape, batch_sizes, autocast_dtype)
    except Exception as e:  # noqa: BLE001 - a mode that cannot run here: try the next
      tried[mode] = f"{type(e).__name__}: {e}"[:300]
      torch._dynamo.reset()
      continue
    return {**out, "module": compiled, "mode": mode, "compile_s": time.perf_counter() - t}
  return out


def tuned_counts(
  module: nn.Module,
  x: np.ndarray,
  num: int,
  batch_size: int,
  *,
  sigma: float,
  num_classes: int,
  autocast_dtype: str = "fp32",
  generator: torch.Generator | None = None,
) -> np.ndarray:
  """Class counts of ``num`` noisy copies of one input, computed on the module's device.

  Args:
    module: from :func:`tuned_module`.
    x: one input in rsjax's layout (``[H, W, C]``), NumPy.
    num: samples.
    batch_size: forward batch (every batch is full; the extra rows of the last
      one are not counted).
    sigma: Gaussian noise standard deviation.
    num_classes: number of classes.
    autocast_dtype: ``"fp32"`` (full-precision float32: TF32 off for matmuls and
      cuDNN convolutions), ``"tf32"`` (TF32 on for both) or ``"bf16"``
      (``torch.autocast``), as rsjax's declared precisions.
    generator: a ``torch.Generator`` on the module's device.

  Returns:
    ``[num_classes]`` int64 counts (NumPy); the only host sync is reading them.
  """
  dev = next(module.parameters()).device
  xt = _torch_input(x, dev)
  b = min(int(batch_size), int(num))
  counts = torch.zeros(num_classes, dtype=torch.int64, device=dev)
  ones = torch.ones(b, dtype=torch.int64, device=dev)
  with _forward_context(dev, autocast_dtype):
    for start in range(0, num, b):
      noise = torch.randn((b,) + tuple(xt.shape), device=dev, generator=generator)
      pred = module(_noisy_batch(xt, noise, sigma)).argmax(1)
      k = min(b, num - start)
      counts.scatter_add_(0, pred[:k], ones[:k])
  return counts.cpu().numpy()


def tuned_certify(
  module: nn.Module,
  x: np.ndarray,
  *,
  n0: int,
  n: int,
  alpha: float,
  sigma: float,
  num_classes: int,
  batch_size: int,
  autocast_dtype: str = "fp32",
  generator: torch.Generator | None = None,
) -> tuple[int, float]:
  """Cohen et al.'s CERTIFY for one input with :func:`tuned_counts`.

  Returns:
    ``(prediction, radius)``; ``(-1, 0.0)`` when it abstains. The statistics are
    rsjax's (one-sided Clopper-Pearson, ``sigma * Phi^-1(p_lower)``).
  """
  from rsjax import stats

  kw = dict(
    sigma=sigma, num_classes=num_classes, autocast_dtype=autocast_dtype, generator=generator
  )
  top = int(np.argmax(tuned_counts(module, x, n0, batch_size, **kw)))
  k = int(tuned_counts(module, x, n, batch_size, **kw)[top])
  p_lower = float(stats.clopper_pearson_lower(k, n, alpha))
  if p_lower < 0.5:
    return -1, 0.0
  return top, float(stats.gaussian_radius(p_lower, sigma))


#: rsjax's precisions (``rsjax.engine.precision``) as the twin's forward settings.
AUTOCAST = {"float32": "fp32", "tf32": "tf32", "bfloat16": "bf16"}


def _timed(certify, images: int, samples: int) -> dict:
  """One warm-up image (``certify(0)``: cuDNN autotuning, a compiled module's first call),
  then ``images`` images (``certify(1)``, ...) in turn, in rounds (``samples`` a call)."""
  first = rounds.seconds(lambda: certify(0))
  timing = rounds.time_rounds(lambda i: certify(1 + i % images), samples, min_calls=images)
  return {
    "first_call_s": first,
    "seconds_measured": timing.per_call,
    "seconds_per_image_measured": statistics.median(timing.per_call),
    **timing.as_dict(),
  }


def _count_point(module, x, batch: int, call_s: float, seed: int, **kw) -> dict:
  gen = torch_generator(seed)

  def count(num: int) -> None:
    tuned_counts(module, x, num, batch, generator=gen, **kw)

  # cuDNN autotuning, a compiled module's first call at this batch; and the pace of this batch
  first = rounds.seconds(lambda: count(CHUNKS * batch))
  num = point_samples(batch, int(CHUNKS * batch * call_s / max(first, 1e-6)))
  timing = rounds.time_rounds(lambda _: count(num), num)
  return {"batch": batch, "samples": num, "first_call_s": first, **timing.as_dict()}


def sweep_counts(
  module: nn.Module,
  x: np.ndarray,
  batches,
  *,
  sigma: float,
  num_classes: int,
  autocast_dtype: str = "fp32",
  call_s: float = 0.5,
  budget_s: float | None = None,
  seed: int = 0,
) -> list[dict]:
  """The twin's side of ``rsjax bench``'s batch sweep (``rsjax.app.bench.sweep``): the counts of
  one input (:func:`tuned_counts`) at each batch of ``batches``, the largest first, until the
  point that passes ``budget_s`` seconds in all (``rsjax.app.bench.sweep.BUDGET_S``). At each
  batch, one untimed call of ``CHUNKS`` batches first (warm-up, and the pace of the batch),
  then rounds (:mod:`rsjax.app.bench.rounds`) of calls of about ``call_s`` seconds at that pace
  (whole batches, at least ``CHUNKS``: ``rsjax.app.bench.sweep.point_samples``). One dict a batch,
  in increasing order: ``batch``, ``samples`` (of a call), ``first_call_s``, the samples per
  second (median, min, max) and the rounds."""
  kw = dict(sigma=sigma, num_classes=num_classes, autocast_dtype=autocast_dtype)
  budget_s = sweep.BUDGET_S if budget_s is None else budget_s
  points, start = [], time.perf_counter()
  for b in sorted({int(b) for b in batches}, reverse=True):
    points.append(_count_point(module, x, b, call_s, seed, **kw))
    if time.perf_counter() - start > budget_s:
      break
  return sorted(points, key=lambda p: p["batch"])


def _best(points: list[dict]) -> dict | None:
  """The batch of ``points`` with the most samples per second (median), None without points."""
  best = max(points, key=lambda p: p["samples_per_s"], default=None)
  return None if best is None else {"batch": best["batch"], "samples_per_s": best["samples_per_s"]}


def time_twin(
  model,
  target,
  xs: np.ndarray,
  *,
  precision: str,
  n0: int,
  n: int,
  alpha: float,
  batch: int,
  images: int,
  compile_modes: str = "auto",
  seed: int = 0,
  sweep_batches=(),
  sweep_call_s: float = 0.5,
) -> dict:
  """Times the tuned twin of ``model``, eager and compiled, as ``rsjax bench`` timed rsjax:
  Cohen et al.'s CERTIFY (n0 selection and N estimation samples, one image a call) of one
  warm-up image ``xs[0]``, then ``xs[1 : images + 1]`` in turn, in rounds, at ``precision``
  and ``batch``; then the counts of ``xs[0]`` at each of ``sweep_batches`` (eager; the compiled
  twin at the eager one's :data:`COMPILED_SWEEP_POINTS` best, compiled with the rest).

  Args:
    model: the ``rsjax.models`` NNX model whose twin is timed (``from_flax``).
    target: the ``rsjax.app.bench.Target`` rsjax timed (its ``apply_fn`` and ``params``: the
      twin's logits are checked against them first, on noisy inputs), its sigma and classes.
    xs: ``[images + 1, *input_shape]`` inputs in rsjax's layout.
    precision: an rsjax precision (:data:`AUTOCAST`).
    n0, n, alpha, batch, images: as the rsjax run measured.
    compile_modes: ``torch.compile`` modes tried in order (``"auto"``: :data:`COMPILE_MODES`),
      or ``"none"`` (the eager twin only).
    seed: seed of the twin's noise.
    sweep_batches, sweep_call_s: the batches of rsjax's sweep, the seconds of a timed call.

  Returns:
    ``{"precision", "batch", "logits", "eager", "compiled"}``: the logits check, and for each
    form its first call, the seconds per image of each round, its samples per second (median,
    min, max), its ``sweep`` (:func:`sweep_counts`) and ``best`` point (``compiled`` also has
    its mode, compile seconds and the modes that failed; None with ``compile_modes="none"``).

  Raises:
    ValueError: no twin of this model (``from_flax``).
    AssertionError: the twin's logits differ from rsjax's (``check_same_logits``).
  """
  eager, _ = tuned_module(model, target.input_shape)
  rng = np.random.default_rng(seed)
  noisy = np.clip(xs[:4] + target.sigma * rng.standard_normal(xs[:4].shape), 0, 1)
  logits = check_same_logits(eager, target.apply_fn, target.params, noisy.astype(np.float32))
  autocast = AUTOCAST[precision]
  kw = dict(sigma=target.sigma, num_classes=target.num_classes)

  def timed(module, batches) -> dict:
    gen = torch_generator(seed)
    cert = dict(n0=n0, n=n, alpha=alpha, batch_size=batch, autocast_dtype=autocast, **kw)
    out = _timed(lambda i: tuned_certify(module, xs[i], generator=gen, **cert), images, n0 + n)
    points = sweep_counts(
      module, xs[0], batches, autocast_dtype=autocast, call_s=sweep_call_s, seed=seed, **kw
    )
    return {**out, "sweep": points, "best": _best(points)}

  out = {"precision": precision, "batch": batch, "logits": logits, "compiled": None}
  out["eager"] = timed(eager, sweep_batches)
  if compile_modes != "none":
    ranked = sorted(out["eager"]["sweep"], key=lambda p: -p["samples_per_s"])
    top = sorted(p["batch"] for p in ranked[:COMPILED_SWEEP_POINTS])
    sizes = (min(batch, n0), min(batch, n), *top)
    c = compiled_twin(eager, target.input_shape, modes=compile_modes, batch_sizes=sizes,
                      autocast_dtype=autocast)  # fmt: skip
    out["compiled"] = {"mode": c["mode"], "compile_s": c["compile_s"], "tried": c["tried"]}
    if c["mode"] is not None:
      out["compiled"].update(timed(c["module"], top))
  return out
