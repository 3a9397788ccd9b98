"""The certified accuracies of ``docs/ABLATION.md``'s reproduction tables, bound to
``results/ablation_mnist.json`` (``experiments/ablation_mnist.py``, issue 72): each row is the
run its label names, every figure to three decimals. No JAX: only the markdown and the JSON.
"""

from __future__ import annotations

import pytest

from tests import test_figures as tf

DOC = "docs/ABLATION.md"
RUNS = "results/ablation_mnist.json"
PATCH_RADII = ("0", "1", "2", "3", "4", "5")
L0_RADII = ("0", "1", "2", "4", "6", "8", "10")

#: (the row's first two cells, the run's key in the JSON, its radii)
ROWS = (
  ("column, s = 4 | 1,000", "column_n1000", PATCH_RADII),
  ("column, s = 4, 120 epochs | 1,000", "column_n1000_e120", PATCH_RADII),
  ("column, s = 4 | 2,000", "column_n2000", PATCH_RADII),
  ("column, s = 4 | 4,000", "column_n4000", PATCH_RADII),
  ("column, s = 4, 60 epochs | 4,000", "column_n4000_e60", PATCH_RADII),
  ("block, s = 10 | 4,000", "block_n4000", PATCH_RADII),
  ("column, s = 4, all of MNIST (10,000 test digits) | 60,000", "column_n60000", PATCH_RADII),
  ("column, s = 4, ResNet-20 on mnist5k32 | 4,000", "column_n4000_c32", PATCH_RADII),
  ("k = 45 | 1,000", "l0_n1000", L0_RADII),
  ("k = 45, 120 epochs | 1,000", "l0_n1000_e120", L0_RADII),
  ("k = 45 | 4,000", "l0_n4000", L0_RADII),
  ("k = 45, all of MNIST (500 test digits) | 60,000", "l0_n60000", L0_RADII),
  ("k = 45, all of MNIST, 60 epochs (500 test digits) | 60,000", "l0_n60000_e60", L0_RADII),
)


def _bind(label: str, key: str, radii: tuple[str, ...]) -> tf.Bind:
  figures = tuple(tf.f3(f"{key}/certified_accuracy/{r}") for r in radii)
  return tf.Bind(DOC, f"| {label} |" + " {} |" * len(radii), RUNS, figures)


@pytest.mark.parametrize("bind", [_bind(*row) for row in ROWS], ids=lambda b: b.template[2:40])
def test_a_reproduction_row_is_its_run(bind):
  failures = tf.check(bind)
  assert not failures, "\n".join(failures)
