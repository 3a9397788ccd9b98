"""The certified accuracies of ``docs/DUAL.md``'s CIFAR-shaped table, bound to
``results/dual_cifar_shaped.json`` (``python experiments/dual_mnist.py --quick
--cifar-shaped``, issue 73): each row is the curve its label names, to two decimals (``0`` for
none). No JAX: only the markdown and the JSON.
"""

from __future__ import annotations

import pytest

from tests import test_figures as tf

DOC = "docs/DUAL.md"
RUNS = "results/dual_cifar_shaped.json"
RADII = ("0", "0.25", "0.5", "0.75", "1", "1.25", "1.5", "1.75", "2")

#: (the row's label, the curve's path in the JSON)
ROWS = (
  ("Cohen, sigma 0.12 (ResNet-20)", "rows/cohen_0.12/certified_accuracy"),
  ("Cohen, sigma 0.25 (ResNet-20)", "rows/cohen_0.25/certified_accuracy"),
  ("Cohen, sigma 0.5 (ResNet-20)", "rows/cohen_0.5/certified_accuracy"),
  ("Cohen, sigma 1.0 (ResNet-20)", "rows/cohen_1/certified_accuracy"),
  ("envelope (best sigma per radius, after the fact; ResNet-20)", "envelope"),
  ("IDRS, sigma 1.0 (ResNet-20)", "rows/idrs_1/certified_accuracy"),
  ("IDRS, best of the four per radius (ResNet-20)", "best_idrs"),
  ("DDRS, sigma 0.5 (ResNet-20)", "rows/ddrs_0.5/certified_accuracy"),
  ("DDRS, best of the four per radius (ResNet-20)", "best_ddrs"),
  ("**Dual RS** (chosen on validation; ResNet-20)", "rows/dual/certified_accuracy"),
  ("oracle routing (after the fact; no classifier; ResNet-20)", "oracle"),
)


def _cell(value: float) -> str:
  """A table cell: two decimals, ``0`` for none."""
  return "0" if value == 0 else f"{value:.2f}"


def _bind(label: str, curve: str) -> tf.Bind:
  figures = tuple(tf.F(f"{curve}/{r}", _cell) for r in RADII)
  return tf.Bind(DOC, f"| {label} |" + " {} |" * len(RADII), RUNS, figures)


@pytest.mark.parametrize("bind", [_bind(*row) for row in ROWS], ids=lambda b: b.template[2:40])
def test_a_cifar_shaped_row_is_its_curve(bind):
  failures = tf.check(bind)
  assert not failures, "\n".join(failures)
