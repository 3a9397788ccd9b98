"""Band-only first convolution of derandomized smoothing with a LeNet (issue 72): the counts of
``patch_counts`` for column and row ablation, computing ``conv1`` only near the band.

Why: at a band position the encoded image is 0 in every channel outside the band, and
``LeNet.first_conv`` (``few_channel_conv``: multiply-adds of shifted images, then ``+ bias``)
gives exactly its bias wherever its receptive field misses the band (``0 * k`` sums to +-0,
and +-0 + bias is the bias). With a band of ``s`` columns only ``s + k - 1`` of the output
columns vary, yet the generic forward computes all of them: on a CPU ``conv1`` is more than
half of LeNet-5's forward on 28x28 encoded digits. Here each (image, position) computes
``conv1`` on a window of columns around its band (rows for row ablation), the other output
columns are filled with the bias, and the rest of the network runs as
``LeNet.after_first_conv``.

The window is contiguous in a layout of each image doubled along the band's axis,
``[0]*pad x [0]*pad x 0...`` (zero padding between the copies, not wrapping), so a band that
wraps around the image's edge is one window too; the ``k - 1 - pad`` outputs that straddle
the two copies are junk and are dropped. Every window has as many outputs as the most any
position needs (``s + 4`` for a band of ``s`` columns that does not wrap, ``s + 6`` for one
that does, with LeNet's 5x5 kernel and padding 2); positions are static, so the windows and
where their outputs go are computed on the host. The windows keep the image's layout
(``[b, H + 4, window, 2C]`` through ``few_channel_conv`` itself): on the 2-core CPU of issue
72 their conv1 took 3.2 ms per 1000 encoded images against 3.6 ms with the batch as the last
axis and 5.8 ms with the rows last (band of 2, a busy machine), and in the forward 2.4 ms
against the whole image's 10.5 ms (forward 9.0 against 17.9 ms).

What the counts equal: those of the generic path up to float rounding. The multiply-adds are
the same, in the same order, but XLA:CPU fuses some of them into FMAs differently in the two
programs, so a few outputs in the band's reach differ by an ulp (``tests/test_ablation_band.py``
checks conv1 within 1e-6, exactly the bias outside the band's reach, logits within 1e-5 and
equal counts). A LeNet that normalizes its input (zeros are not zeros after it), a first
convolution that is XLA's (many channels) and any other classifier or ablation take the
generic path.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rsjax.ablation._ablate import encode, votes_of_logits
from rsjax.engine import precision as precision_lib
from rsjax.engine.step import cast_floating
from rsjax.models import EvalApply, LeNet, few_channel_conv

__all__ = [
  "BandPlan",
  "band_counts",
  "band_first_conv",
  "band_lenet",
  "band_plan",
  "merged_model",
]


@dataclasses.dataclass(frozen=True)
class BandPlan:
  """Where each band position's window of ``conv1`` lies (host arrays and sizes).

  The layout of an image is its lines along ``axis`` doubled, ``[0]*pad x [0]*pad x 0...``;
  output ``q`` of the convolution on it is output line ``q mod period`` of the image (junk
  where that is ``size`` or more, at the seam).

  Attributes:
    axis: the image axis of the bands in ``[b, H, W, C]``: 2 (column bands) or 1 (rows).
    pad: the first convolution's zero padding.
    period: ``n + pad``, the lines of one copy in the layout (``n`` the image's).
    width: the layout's length.
    size: ``n_out``, the output lines of ``conv1`` along ``axis``.
    length: ``L``, the outputs of every window.
    starts: ``[P]`` int32, the layout index of each position's window (and its first output).
    keep: ``[P, L + k - 1]`` bool, which lines of each window are kept pixels (``L``: its
      outputs, ``k``: the kernel's taps along ``axis``).
    src: ``[P, n_out]`` int32, the window output of each output line in the band's reach
      (``L``, the bias, for the others).
  """

  axis: int
  pad: int
  period: int
  width: int
  size: int
  length: int
  starts: np.ndarray
  keep: np.ndarray
  src: np.ndarray

  @property
  def geometry(self) -> tuple[int, int, int]:
    """The static part: ``(axis, pad, width)``."""
    return self.axis, self.pad, self.width


def _band_lines(masks: np.ndarray) -> tuple[int, np.ndarray] | None:
  """``(axis, lines [P, n])``: the kept columns (axis 2) or rows (axis 1) of band masks
  ``[P, H, W]``; None unless every mask is whole columns or whole rows."""
  if np.array_equal(masks, np.broadcast_to(masks[:, :1, :], masks.shape)):
    return 2, masks[:, 0, :]
  if np.array_equal(masks, np.broadcast_to(masks[:, :, :1], masks.shape)):
    return 1, masks[:, :, 0]
  return None


def _reach(lines: np.ndarray, kernel: int, pad: int) -> np.ndarray:
  """``[P, n_out]`` bool: the output lines of a ``kernel``-wide convolution (``pad`` zeros each
  side) whose receptive field holds a kept line of ``lines [P, n]``."""
  p, n = lines.shape
  padded = np.concatenate([np.zeros((p, pad), bool), lines, np.zeros((p, pad), bool)], axis=1)
  n_out = n + 2 * pad - kernel + 1
  return np.stack([padded[:, j : j + kernel].any(axis=1) for j in range(n_out)], axis=1)


def band_plan(masks: np.ndarray, kernel: tuple[int, int], pad: int) -> BandPlan | None:
  """The windows of band masks ``[P, H, W]`` (:func:`~rsjax.ablation.position_masks`) for a
  first convolution of ``kernel = (kh, kw)`` taps and ``pad`` zero padding; None where the
  masks are not bands or a window would not be narrower than the image."""
  found = _band_lines(np.asarray(masks, bool))
  if found is None:
    return None
  axis, lines = found
  n, kernel = lines.shape[1], int(kernel[axis - 1])
  reach = _reach(lines, kernel, pad)
  n_out, period = reach.shape[1], n + pad
  # The fewest outputs from start q covering a position's reach, for every start q < period.
  dist = (np.arange(n_out)[None, :] - np.arange(period)[:, None]) % period  # [period, n_out]
  need = np.where(reach[:, None, :], dist[None] + 1, 0).max(axis=2)  # [P, period]
  starts = np.argmin(need, axis=1)
  length = int(need[np.arange(len(starts)), starts].max())
  if length >= n_out:
    return None
  cols = starts[:, None] + np.arange(length + kernel - 1)  # the layout's lines of each window
  pixel = cols % period - pad
  inside = (pixel >= 0) & (cols < 2 * period)
  keep = inside & np.take_along_axis(lines, np.where(inside, pixel, 0), axis=1)
  at = (np.arange(n_out)[None, :] - starts[:, None]) % period  # [P, n_out]: from its start
  src = np.where(reach & (at < length), at, length).astype(np.int32)
  return BandPlan(
    axis, pad, period, int(cols.max()) + 1, n_out, length, starts.astype(np.int32), keep, src
  )


def merged_model(graphdef, params) -> nnx.Module | None:
  """The NNX model of ``graphdef`` with ``params`` (a copy), or None where they do not merge."""
  try:
    return nnx.merge(graphdef, params, copy=True)
  except Exception:  # noqa: BLE001 -- any failure: not an NNX model of these params
    return None


def band_lenet(apply_fn, params) -> LeNet | None:
  """The rsjax :class:`~rsjax.models.LeNet` behind ``apply_fn`` (an
  ``rsjax.models.to_apply_fn`` forward) when the band path computes its votes: no input
  normalization and a :func:`~rsjax.models.few_channel_conv` first convolution; else None."""
  if not isinstance(apply_fn, EvalApply):
    return None
  model = merged_model(apply_fn.graphdef, params)
  if not isinstance(model, LeNet) or model.normalize is not None:
    return None
  return model if model.elementwise_first_conv else None


def _layout(x: jax.Array, axis: int, pad: int, width: int) -> jax.Array:
  """``x [B, H, W, C]`` doubled along ``axis`` as ``[0]*pad x [0]*pad x 0...``, ``width``
  long."""
  first = jnp.pad(x, [(pad, 0) if a == axis else (0, 0) for a in range(4)])
  both = jnp.concatenate([first, first], axis=axis)
  extra = width - both.shape[axis]
  if extra <= 0:
    return jax.lax.slice_in_dim(both, 0, width, axis=axis)
  return jnp.pad(both, [(0, extra) if a == axis else (0, 0) for a in range(4)])


def _window_conv(model: LeNet, layout, starts, keep, src, geometry: tuple, dtype):
  """``conv1`` ``[B * p, H', W', c1]`` (image-major) of the encoded images of the layout
  ``[B, ...]`` at ``p`` positions (the plan's ``starts [p]``, ``keep [p, L + k - 1]`` and
  ``src [p, n_out]``; ``geometry``: :attr:`BandPlan.geometry`), ``dtype`` the compute
  dtype (None: the layout's)."""
  axis, pad, _ = geometry
  b, p, lin = layout.shape[0], starts.shape[0], keep.shape[1]

  def windows(layout):  # [B, p, H', L, c1] or [B, p, L, W', c1]
    cols = starts[:, None] + jnp.arange(lin, dtype=starts.dtype)
    xw = jnp.moveaxis(jnp.take(layout, cols, axis=axis), axis, 1)  # [B, p, ..., L + k - 1, ...]
    z = encode(xw, keep[None, :, None, :] if axis == 2 else keep[None, :, :, None])
    z = z.reshape((b * p, *z.shape[2:]))
    z = jnp.pad(z, [(pad, pad) if a == 3 - axis else (0, 0) for a in range(4)])
    h = few_channel_conv(model.conv1, z if dtype is None else z.astype(dtype), pad=0)
    return h.reshape((b, p, *h.shape[1:]))

  # The windows are a branch's output, so they are computed once: XLA would fuse them into
  # the gather below and compute the multiply-adds for every output line (an optimization
  # barrier does not last until fusion on the CPU). The predicate is true, not a constant.
  shape = jax.eval_shape(windows, layout)
  h = jax.lax.cond(starts[0] >= 0, windows, lambda _: jnp.zeros(shape.shape, shape.dtype), layout)
  bias = model.conv1.bias
  fill = jnp.zeros(h.shape[-1], h.dtype) if bias is None else bias[...].astype(h.dtype)
  fill = jnp.broadcast_to(fill, (*h.shape[: axis + 1], 1, *h.shape[axis + 2 :]))
  h = jnp.concatenate([h, fill], axis=axis + 1)
  idx = src[None, :, None, :, None] if axis == 2 else src[None, :, :, None, None]
  out = jnp.take_along_axis(h, idx, axis=axis + 1)
  return out.reshape((b * p, *out.shape[2:]))


def band_first_conv(model: LeNet, x: jax.Array, plan: BandPlan) -> jax.Array:
  """``conv1`` of the encoded images of ``x [B, H, W, C]`` at every position of ``plan``:
  ``[B * P, H', W', c1]`` in the order of ``encode(x[:, None], masks[None])`` reshaped, as
  ``model.first_conv`` gives it up to float rounding."""
  layout = _layout(jnp.asarray(x), *plan.geometry)
  arrays = (jnp.asarray(plan.starts), jnp.asarray(plan.keep), jnp.asarray(plan.src))
  return _window_conv(model, layout, *arrays, plan.geometry, None)


def _steps(plan: BandPlan, per_step: int) -> tuple[np.ndarray, ...]:
  """The plan's ``(starts, keep, src, valid)`` as ``[steps, per_step, ...]``: the
  positions padded (with the first one's windows, not counted) to whole steps."""
  p = plan.starts.shape[0]
  per_step = max(1, min(int(per_step), p))
  steps = -(-p // per_step)
  order = np.concatenate([np.arange(p), np.zeros(steps * per_step - p, np.int64)])
  valid = np.arange(steps * per_step) < p
  arrays = (plan.starts[order], plan.keep[order], plan.src[order], valid)
  return tuple(a.reshape((steps, per_step, *a.shape[1:])) for a in arrays)


@functools.partial(jax.jit, static_argnums=(0, 4, 5, 6, 7))
def _band_counts(apply_fn, params, x, steps, num_classes, dtype, threshold, geometry):
  """Counts ``[B, C]`` of ``x [B, H, W, C]`` over the steps of :func:`_steps`
  (``geometry``: :attr:`BandPlan.geometry`)."""
  model = nnx.merge(apply_fn.graphdef, params, copy=True)
  layout = _layout(x, *geometry)

  def step(acc, s):
    starts, keep, src, valid = s
    b, p = x.shape[0], starts.shape[0]
    h = _window_conv(model, layout, starts, keep, src, geometry, dtype)
    votes = votes_of_logits(model.after_first_conv(h), b * p, num_classes, threshold)
    votes = votes.reshape((b, p, num_classes))
    return acc + jnp.sum(votes * valid[None, :, None].astype(jnp.int32), axis=1), None

  init = jnp.zeros((x.shape[0], num_classes), jnp.int32)
  return jax.lax.scan(step, init, steps)[0]


def band_counts(
  apply_fn, params, x: np.ndarray, masks: np.ndarray, num_classes: int, batch: int = 1000,
  precision: str = "float32", threshold: float | None = None,
) -> np.ndarray | None:  # fmt: skip
  """``patch_counts``' counts (same arguments) by the band path, or None where it does not
  apply (not a LeNet of :func:`band_lenet`, not band masks, or no column saved)."""
  model = band_lenet(apply_fn, params)
  if model is None:
    return None
  plan = band_plan(masks, model.conv1.kernel_size, model.padding)
  if plan is None:
    return None
  x = np.asarray(x, np.float32)
  steps = _steps(plan, max(1, int(batch) // max(1, x.shape[0])))
  dtype = precision_lib.compute_dtype(precision)
  with precision_lib.context(precision):
    out = _band_counts(
      apply_fn, cast_floating(params, dtype), jnp.asarray(x), steps, int(num_classes), dtype,
      None if threshold is None else float(threshold), plan.geometry,
    )  # fmt: skip
  return np.asarray(out, np.int64)
