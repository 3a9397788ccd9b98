"""The counts program's sampling loop: a static trip count and no conditional (issue 52).

On a GPU, XLA runs a ``while`` whose trip count it cannot derive by asking the
host for the loop condition every iteration, and a ``conditional`` by reading
its predicate on the host: a sync per step. The engine's planned pass
(``rsjax.engine.counts._counts_jit``) gives every device the same Python-int
number of steps and masks the overhang, and draws a step ahead instead of in a
``cond``.

Two checks, from the most to the least version-independent:

* the jaxpr: no ``while`` and no ``cond`` equation at any depth, and the
  sampling loop is a ``scan`` of static ``length`` ``plan.steps_per_device``
  (``fori_loop`` with Python-int bounds traces to ``scan``; with traced bounds,
  as before, to ``while``);
* the compiled CPU program: no ``conditional``, and when this XLA annotates
  trip counts at all (``known_trip_count`` in a while's backend_config), every
  ``while`` has one (a scan lowers to a counted while; threefry's rounds too).
"""

import functools
import re

import jax
import numpy as np
import pytest

from rsjax import models
from rsjax import noise as noise_lib
from rsjax.engine import counts as engine_counts
from rsjax.engine.step import make_chunk_plan
from rsjax.util import local_mesh
from tests.jaxpr_ops import all_eqns


@pytest.fixture(scope="module")
def lenet():
  model = models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=0)
  return models.to_apply_fn(model)


def _program(lenet, devices: int, num_inputs: int = 3, num: int = 200, batch: int = 50):
  """The counts program's static arguments and its positional arguments."""
  apply_fn, params = lenet
  x = np.random.default_rng(0).random((num_inputs, 28, 28, 1), dtype=np.float32)
  sig = np.full((num_inputs, 1, 1, 1), 0.25, np.float32)
  ids = np.arange(num_inputs, dtype=np.uint32)
  plan = make_chunk_plan(num_inputs, num, batch, devices)
  static = dict(
    apply_fn=apply_fn,
    noise=noise_lib.get_noise(None).bind(x, sig),
    num_classes=10,
    plan=plan,
    mesh=local_mesh(devices),
    compute_dtype=None,
  )
  return plan, static, (jax.random.key(0), params, x, sig, ids)


@pytest.mark.parametrize("devices", [1, 4])
def test_the_sampling_loop_has_a_static_trip_count_and_no_cond(lenet, devices):
  plan, static, args = _program(lenet, devices)
  jaxpr = jax.make_jaxpr(functools.partial(engine_counts._counts_jit, **static))(*args)
  names = [e.primitive.name for e in all_eqns(jaxpr.jaxpr)]
  assert "while" not in names and "cond" not in names
  lengths = [e.params["length"] for e in all_eqns(jaxpr.jaxpr) if e.primitive.name == "scan"]
  assert lengths == [plan.steps_per_device]


def test_the_overhang_is_a_static_trip_count_too(lenet):
  # 5 inputs x 4 chunks = 20 steps on 3 devices: 7 each, the last device 1 past the end.
  plan, static, args = _program(lenet, 3, num_inputs=5)
  assert plan.steps_per_device * 3 > plan.steps
  jaxpr = jax.make_jaxpr(functools.partial(engine_counts._counts_jit, **static))(*args)
  lengths = [e.params["length"] for e in all_eqns(jaxpr.jaxpr) if e.primitive.name == "scan"]
  assert lengths == [plan.steps_per_device]
  counts = np.asarray(engine_counts._counts_jit(*args, **static)).sum(0)
  assert (counts[:5, :10].sum(1) == 200).all() and counts[:, 10].sum() == 0


def test_the_compiled_program_has_no_conditional_and_counted_loops(lenet):
  plan, static, args = _program(lenet, 4)
  text = engine_counts._counts_jit.lower(*args, **static).compile().as_text()
  assert " conditional(" not in text
  whiles = [line for line in text.splitlines() if re.search(r"\swhile\(", line)]
  assert whiles
  if "known_trip_count" in text:  # this XLA annotates the trip counts it derives
    assert all("known_trip_count" in line for line in whiles), whiles
    trips = {int(n) for n in re.findall(r'known_trip_count":\{"n":"(\d+)"', text)}
    assert plan.steps_per_device in trips
