"""Sampling rules as values: the driver runs any rule, and imports none by name."""

import ast
import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rsjax
from rsjax.engine import budget as budgeted
from rsjax.engine.cohen_rule import cohen_passes
from rsjax.engine.counts import resolve_counts

ROOT = pathlib.Path(rsjax.__file__).parent
D = 8


def _linear(params, x):
  z = x.reshape(x.shape[0], -1) @ params
  return jnp.stack([-z, z], axis=-1)


def _problem(num=6):
  rng = np.random.default_rng(0)
  w = rng.normal(size=D).astype(np.float32)
  x = rng.normal(size=(num, D)).astype(np.float32)
  return w / np.linalg.norm(w), x


@dataclasses.dataclass(frozen=True)
class TwoRounds:
  """A toy rule: the ``n0`` selection samples, then ``n`` estimation samples in two rounds."""

  def run(self, key, counts, rule, settings):
    c0 = counts(jax.random.fold_in(key, 0), settings.n0)
    k_est = jax.random.fold_in(key, 1)
    half = settings.n // 2
    c1 = sum(
      np.asarray(resolve_counts(counts(jax.random.fold_in(k_est, r), m)))
      for r, m in enumerate((half, settings.n - half))
    )
    return rule(resolve_counts(c0), c1)


def test_a_custom_rule_plugs_into_the_driver():
  w, x = _problem()
  settings = rsjax.Sampling(n0=20, n=300, batch_size=100)
  key = jax.random.key(3)
  counts, rule = cohen_passes(_linear, w, x, 0.5, None, num_classes=2, settings=settings)
  assert isinstance(TwoRounds(), rsjax.SamplingRule)
  cert = rsjax.run_certify(key, counts, rule, settings, sampling_rule=TwoRounds())

  def drawn(k, num):
    return rsjax.sample_counts(k, _linear, w, x, sigma=0.5, num_classes=2, num=num, batch_size=100)

  k_est = jax.random.fold_in(key, 1)
  np.testing.assert_array_equal(cert.counts_selection, drawn(jax.random.fold_in(key, 0), 20))
  np.testing.assert_array_equal(
    cert.counts, drawn(jax.random.fold_in(k_est, 0), 150) + drawn(jax.random.fold_in(k_est, 1), 150)
  )
  assert np.all(cert.counts.sum(axis=1) == 300)
  # The method's rule made the certificate: Cohen's bound of the two rounds' counts.
  again = rsjax.certificate_from_counts(
    cert.counts_selection, cert.counts, n=300, alpha=0.001, scale=np.full(len(x), 0.5), dim=D
  )
  np.testing.assert_array_equal(cert.prediction, again.prediction)
  np.testing.assert_allclose(cert.radius, again.radius)


def _cohen_passes():
  """The linear problem's inputs, settings, and Cohen's counts source and certificate rule."""
  w, x = _problem()
  settings = rsjax.Sampling(n0=20, n=300, batch_size=100)
  counts, rule = cohen_passes(_linear, w, x, 0.5, None, num_classes=2, settings=settings)
  return w, x, settings, counts, rule


def test_fixed_n_is_the_default_rule_of_certify():
  w, x, settings, counts, rule = _cohen_passes()
  a = rsjax.run_certify(7, counts, rule, settings, sampling_rule=rsjax.FixedN())
  b = rsjax.certify(7, _linear, w, x, sigma=0.5, num_classes=2, settings=settings)
  np.testing.assert_array_equal(a.counts, b.counts)
  np.testing.assert_array_equal(a.counts_selection, b.counts_selection)
  np.testing.assert_array_equal(a.radius, b.radius)


def test_rules_refuse_what_they_cannot_run():
  _, _, settings, counts, rule = _cohen_passes()
  with pytest.raises(ValueError, match="sampling_rule must have run"):
    rsjax.run_certify(0, counts, rule, settings, sampling_rule=(0.5, 1.0))
  with pytest.raises(ValueError, match="Cohen's binary radius"):  # another method's rule
    rsjax.run_certify(
      0, counts, lambda c0, c1: None, settings, sampling_rule=budgeted.Budget(grid=(0.5,))
    )


def _path(module: str) -> pathlib.Path | None:
  base = ROOT.parent / module.replace(".", "/")
  path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
  return path if path.exists() else None


def _imports(path: pathlib.Path) -> set[str]:
  """Modules of rsjax that ``path`` imports, lazily (in a function) or not."""
  out = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rsjax"):
      out |= {
        f"{node.module}.{a.name}" if _path(f"{node.module}.{a.name}") else node.module
        for a in node.names
      }
    elif isinstance(node, ast.Import):
      out |= {a.name for a in node.names if a.name.startswith("rsjax")}
  return out


def test_the_driver_imports_no_rule_and_no_method():
  assert _imports(_path("rsjax.engine.driver")) <= {
    "rsjax.engine.counts",
    "rsjax.noise",
    "rsjax.engine.precision",
    "rsjax.stats",
    "rsjax.util",
  }


@pytest.mark.parametrize(
  "module", ["rsjax.engine.driver", "rsjax.engine.cohen_rule", "rsjax.engine.budget", "rsjax.cohen"]
)
def test_no_import_circle_through_the_driver_and_its_rules(module):
  seen, todo = set(), sorted(_imports(_path(module)))
  while todo:
    m = todo.pop()
    if m not in seen and m != "rsjax":
      seen.add(m)
      todo += sorted(_imports(_path(m)))
  assert module not in seen
