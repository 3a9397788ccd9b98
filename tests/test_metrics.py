"""Tests of rsjax.metrics and rsjax.metrics.plots on hand-made results with known answers."""

import numpy as np
import pytest

from rsjax import metrics
from rsjax.metrics import plots
from rsjax.records import io

# 8 inputs: 5 correct with radii 0, 0.25, 0.5, 1.0, 2.0; 1 wrong with radius 0.7;
# 2 abstentions.
CORRECT = np.array([1, 1, 1, 1, 1, 0, 0, 0], bool)
RADIUS = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 0.7, 0.0, 0.0])
PREDICT = np.array([1, 2, 3, 4, 5, 6, -1, -1])


def test_certified_accuracy_known():
  radii = [0.0, 0.25, 0.3, 1.0, 2.0, 2.5]
  acc = metrics.certified_accuracy(CORRECT, RADIUS, radii)
  np.testing.assert_allclose(acc, [5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8, 0])
  assert metrics.certified_accuracy(CORRECT, RADIUS, 0.5) == 3 / 8
  # an abstention is wrong even if a (bad) file marked it correct
  bad = CORRECT.copy()
  bad[6] = True
  assert metrics.certified_accuracy(bad, RADIUS, 0.0, predict=PREDICT) == 5 / 8
  assert metrics.certified_accuracy(bad, RADIUS, 0.0) == 6 / 8


def test_acr_abstention():
  assert metrics.acr(CORRECT, RADIUS) == pytest.approx((0 + 0.25 + 0.5 + 1 + 2) / 8)
  assert metrics.average_certified_radius(CORRECT, RADIUS, predict=PREDICT) == pytest.approx(
    3.75 / 8
  )
  assert metrics.abstention_rate(PREDICT) == 2 / 8
  with pytest.raises(ValueError, match="empty"):
    metrics.acr([], [])
  with pytest.raises(ValueError, match="radius"):
    metrics.acr([True], [-1.0])
  with pytest.raises(ValueError, match="same length"):
    metrics.acr([True, False], [1.0])


def test_radius_grid_no_drift():
  g = metrics.radius_grid(1.5, 0.1)
  assert len(g) == 16 and g[3] == 0.3 and g[-1] == 1.5
  # a radius of exactly 0.3 is certified at r = 0.3
  assert metrics.certified_accuracy([True], [0.3], g)[3] == 1.0
  np.testing.assert_array_equal(metrics.radius_grid(1.0), [0, 0.25, 0.5, 0.75, 1.0])


def test_envelope_and_best_over_sigma():
  a = io.CertifyResults(
    idx=np.arange(4),
    label=np.zeros(4, int),
    predict=np.zeros(4, int),
    radius=np.array([0.1, 0.2, 0.3, 0.4]),
    correct=np.ones(4, bool),
    time=np.zeros(4),
  )
  # b: fewer correct but larger radii
  b = io.CertifyResults(
    idx=np.arange(4),
    label=np.zeros(4, int),
    predict=np.array([0, 0, -1, -1]),
    radius=np.array([1.0, 2.0, 0.0, 0.0]),
    correct=np.array([1, 1, 0, 0], bool),
    time=np.zeros(4),
  )
  radii = [0.0, 0.25, 0.5, 1.5, 3.0]
  best, which = metrics.best_over_sigma([a, b], radii)
  np.testing.assert_allclose(best, [1.0, 0.5, 0.5, 0.25, 0.0])
  np.testing.assert_array_equal(which, [0, 0, 1, 1, 0])
  env, idx = metrics.envelope([[0.1, 0.5], [0.3, 0.2]])
  np.testing.assert_array_equal(env, [0.3, 0.5])
  np.testing.assert_array_equal(idx, [1, 0])


def test_high_prob_accuracy_formula():
  n, alpha, rho = 8, 0.001, 0.01
  got = metrics.high_prob_certified_accuracy(CORRECT, RADIUS, [0.0, 1.0], alpha=alpha, rho=rho)
  term = alpha + np.sqrt(alpha * (1 - alpha) * np.log(1 / rho) / n) + np.log(1 / rho) / (3 * n)
  np.testing.assert_allclose(got, np.array([5 / 8, 2 / 8]) - term)
  assert np.all(got < metrics.certified_accuracy(CORRECT, RADIUS, [0.0, 1.0]))
  with pytest.raises(ValueError, match="rho"):
    metrics.high_prob_certified_accuracy(CORRECT, RADIUS, 0.0, alpha=0.001, rho=0.0)


def _results():
  return io.CertifyResults(
    idx=np.arange(8),
    label=np.where(CORRECT, PREDICT, 0),
    predict=PREDICT,
    radius=RADIUS,
    correct=CORRECT,
    time=np.full(8, 2.0),
  )


def test_summarize_and_tables():
  s = metrics.summarize(_results(), [0.0, 0.5, 1.0])
  assert s["n"] == 8 and s["accuracy"] == 5 / 8 and s["abstention"] == 0.25
  assert s["acr"] == pytest.approx(3.75 / 8) and s["mean_time"] == 2.0
  np.testing.assert_allclose(s["certified_accuracy"], [5 / 8, 3 / 8, 2 / 8])
  r2 = io.CertifyResults(
    idx=np.arange(2),
    label=np.zeros(2, int),
    predict=np.zeros(2, int),
    radius=np.array([0.6, 0.6]),
    correct=np.ones(2, bool),
    time=np.zeros(2),
  )
  table = metrics.format_table(
    {"sigma=0.25": _results(), "sigma=0.50": r2}, [0.0, 0.5, 1.0], show_envelope=True
  )
  lines = table.splitlines()
  assert lines[0].split() == ["r=0", "r=0.5", "r=1", "ACR", "abstain", "n"]
  assert lines[1].split() == ["sigma=0.25", "0.625", "0.375", "0.250*", "0.469", "0.250", "8"]
  assert lines[2].split() == ["sigma=0.50", "1.000*", "1.000*", "0.000", "0.600", "0.000", "2"]
  assert lines[3].split() == ["envelope", "1.000", "1.000", "0.250"]
  md = metrics.format_table({"a": _results()}, [0.0, 0.5], fmt="markdown")
  assert md.splitlines()[0] == "|  | r=0 | r=0.5 | ACR | abstain | n |"
  assert md.splitlines()[2] == "| a | 0.625 | 0.375 | 0.469 | 0.250 | 8 |"
  with pytest.raises(ValueError, match="fmt"):
    metrics.format_table({"a": _results()}, [0.0], fmt="latex")


def test_plot_png(tmp_path):
  import matplotlib

  backend = matplotlib.get_backend()
  r2 = io.CertifyResults(
    idx=np.arange(2),
    label=np.zeros(2, int),
    predict=np.zeros(2, int),
    radius=np.array([0.6, 1.6]),
    correct=np.ones(2, bool),
    time=np.zeros(2),
  )
  out = plots.plot_certified_accuracy(
    tmp_path / "sub" / "curves",
    {"sigma=0.25": _results(), "sigma=0.50": r2},
    title="test",
    show_envelope=True,
    high_prob=(0.001, 0.01),
  )
  assert out.endswith(".png")
  data = open(out, "rb").read()
  assert data[:8] == b"\x89PNG\r\n\x1a\n"
  img = matplotlib.image.imread(out)
  assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
  assert img.std() > 0  # not a blank image
  assert matplotlib.get_backend() == backend  # global backend untouched


def test_a_long_plot_title_is_broken_into_lines_that_fit():
  """`rsjax analyze --plot`'s title (sigma, noise, N, alpha, inputs) was cut off on both sides:
  it is wider than the figure on one line, and is broken until every line fits."""
  title = (
    "certified accuracy: sigma=0.12, 0.25, 0.5, 1; Gaussian (L2); N=100000; "
    "alpha=0.001 (0.0005 each side); 500 inputs"
  )
  fig, ax = plots._axes()
  renderer = fig.canvas.get_renderer()
  figure_box = fig.get_window_extent()
  assert ax.set_title(title).get_window_extent(renderer).width > figure_box.width  # else moot
  plots._fit_title(fig, ax, title)
  fig.tight_layout()
  fig.canvas.draw()
  box = ax.title.get_window_extent(renderer)
  assert ax.title.get_text().replace("\n", " ") == title
  assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1
  assert box.y1 <= figure_box.y1
