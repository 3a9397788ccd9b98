"""Certified-accuracy curves as image files (matplotlib, Agg canvas).

The figure is drawn on a ``matplotlib.figure.Figure`` with an Agg canvas, so
plotting never changes pyplot's global backend and works without a display.
matplotlib is imported only when a plot is made.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from rsjax import metrics

__all__ = ["plot_certified_accuracy", "plot_pa_cdf"]


def _axes():
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  fig = Figure(figsize=(6.4, 4.8))
  FigureCanvasAgg(fig)
  return fig, fig.add_subplot()


def _fit_title(fig, ax, title: str) -> None:
  """Sets ``title``, broken into lines at spaces until each fits the figure's width:
  a title wider than the figure would be cut off on both sides."""
  import textwrap

  width = fig.get_window_extent().width * 0.96
  renderer = fig.canvas.get_renderer()
  text = ax.set_title(title)
  chars = len(title)
  while text.get_window_extent(renderer).width > width and chars > 10:
    chars = int(chars * 0.85)
    text.set_text("\n".join(textwrap.wrap(title, chars)))


def _save(fig, ax, path, *, title, dpi, legend: str) -> str:
  """Finishes ``ax`` and writes ``fig`` to ``path`` (``.png`` added when it has no extension)."""
  path = os.fspath(path)
  if not os.path.splitext(path)[1]:
    path += ".png"
  ax.grid(True, alpha=0.3)
  ax.legend(loc=legend)
  if title:
    _fit_title(fig, ax, title)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=dpi)
  return path


def plot_certified_accuracy(
  path: str | os.PathLike,
  results: Mapping,
  *,
  max_radius: float | None = None,
  radius_step: float = 0.01,
  title: str | None = None,
  show_envelope: bool = False,
  high_prob: tuple[float, float] | None = None,
  dpi: int = 150,
) -> str:
  """Plots certified accuracy against radius, one step curve per result file.

  Each curve is exact: it drops by ``1/n`` at the radius of each correctly
  certified input (no interpolation between grid points).

  Args:
    path: output file; the format follows the extension (``.png``, ``.pdf``,
      ``.svg``); ``.png`` is added when there is none.
    results: mapping ``label -> certify results`` (e.g. one per sigma or method),
      each with ``correct``, ``radius`` and ``predict``.
    max_radius: right end of the x axis; default: the largest certified radius
      of a correct row (at least 0.5), rounded up to ``radius_step``.
    radius_step: spacing of the radius grid.
    title: optional title.
    show_envelope: also draw the best-over-curves envelope (dashed black).
    high_prob: optional ``(alpha, rho)``: also draw, dotted, the
      high-probability lower bound of each curve (Cohen et al.).
    dpi: resolution of raster formats.

  Returns:
    The path written.
  """
  if not results:
    raise ValueError("results must not be empty")
  if max_radius is None:
    top = 0.0
    for res in results.values():
      ok = np.asarray(res.correct, bool) & (np.asarray(res.predict) != -1)
      if ok.any():
        top = max(top, float(np.max(np.asarray(res.radius)[ok])))
    max_radius = max(0.5, float(np.ceil(top / radius_step)) * radius_step)
  if not max_radius > 0:
    raise ValueError(f"max_radius must be > 0, got {max_radius!r}")
  radii = metrics.radius_grid(max_radius, radius_step)

  fig, ax = _axes()
  curves = []
  for label, res in results.items():
    acc = metrics.certified_accuracy(res.correct, res.radius, radii, predict=res.predict)
    curves.append(acc)
    (line,) = ax.step(*_step_curve(res, max_radius), where="post", label=str(label))
    if high_prob is not None:
      alpha, rho = high_prob
      lb = metrics.high_prob_certified_accuracy(
        res.correct, res.radius, radii, alpha=alpha, rho=rho, predict=res.predict
      )
      ax.plot(radii, lb, linestyle=":", color=line.get_color(), label=f"{label} (high-prob.)")
  if show_envelope:
    best, _ = metrics.envelope(np.stack(curves))
    ax.step(radii, best, where="post", linestyle="--", color="black", label="envelope")
  ax.set(xlim=(0, max_radius), ylim=(0, 1), xlabel="radius", ylabel="certified accuracy")
  return _save(fig, ax, path, title=title, dpi=dpi, legend="upper right")


def _step_curve(res, max_radius: float) -> tuple[np.ndarray, np.ndarray]:
  """``(x, y)`` for ``step(where="post")``: the fraction of inputs certified
  correctly at radius >= x, with a breakpoint at each certified radius."""
  ok = np.asarray(res.correct, bool) & (np.asarray(res.predict) != -1)
  r = np.sort(np.asarray(res.radius, np.float64)[ok])
  m, n = r.shape[0], max(len(np.asarray(res.correct)), 1)
  x = np.concatenate([[0.0], r, [max(max_radius, r[-1] if m else 0.0)]])
  y = np.concatenate([[m], m - 1 - np.arange(m), [0]]) / n
  return x, y


def plot_pa_cdf(
  path: str | os.PathLike, pa: Mapping, *, title: str | None = None, dpi: int = 150
) -> str:
  """Empirical CDF of ``p_A`` per model (Sun et al. 2025, Figure 3).

  Args:
    path: output file (extension picks the format; ``.png`` added when none).
    pa: mapping ``label -> [N] p_A`` (e.g. :func:`rsjax.metrics.label_probability`
      of each model's certify results).
    title: optional title.
    dpi: resolution of raster formats.

  Returns:
    The path written.
  """
  if not pa:
    raise ValueError("pa must not be empty")
  fig, ax = _axes()
  for label, p in pa.items():
    p = np.sort(np.asarray(p, np.float64))
    if p.size == 0:
      raise ValueError(f"no p_A values for {label!r}")
    ax.step(
      np.concatenate([[0.0], p, [1.0]]),
      np.concatenate([[0.0], np.arange(1, p.size + 1) / p.size, [1.0]]),
      where="post",
      label=str(label),
    )
  ax.axvline(0.5, color="gray", linestyle=":", linewidth=1)
  xlabel = "p_A (fraction of noisy samples on the label)"
  ax.set(xlim=(0, 1), ylim=(0, 1), xlabel=xlabel, ylabel="fraction of inputs with p_A <= x")
  return _save(fig, ax, path, title=title, dpi=dpi, legend="upper left")
