"""FLOP counts of the benchmarks (``rsjax.app.bench.costs``): exact on known layers, and one count
whatever the backend (the jaxpr, not XLA's per-backend ``cost_analysis``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rsjax import models
from rsjax.app.bench import costs


def _conv_dense(params, x):
  y = jax.lax.conv_general_dilated(
    x, params["k"], (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
  )
  y = jax.nn.relu(y).reshape(x.shape[0], -1)
  return y @ params["w"]


def test_counts_a_convolution_and_a_dense_layer_exactly():
  params = {"k": jnp.zeros((3, 3, 2, 4)), "w": jnp.zeros((6 * 6 * 4, 5))}
  flops, elements = costs.op_costs(_conv_dense, params, (8, 8, 2))
  conv = 2 * (6 * 6 * 4) * (3 * 3 * 2)  # outputs x (kernel x input channels)
  dense = 2 * 5 * (6 * 6 * 4)
  assert flops == conv + dense
  assert elements == 6 * 6 * 4 + 5


def test_grouped_convolution_and_scan_body_are_counted():
  k = jnp.zeros((3, 3, 1, 4))  # 4 groups of 1 input channel (depthwise)

  def fn(p, x):
    y = jax.lax.conv_general_dilated(
      x, p, (1, 1), "SAME", feature_group_count=4, dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    y, _ = jax.lax.scan(lambda c, _: (c @ jnp.ones((4, 4)), None), y.reshape(-1, 4), length=3)
    return y

  flops, _ = costs.op_costs(fn, k, (5, 5, 4))
  assert flops == 2 * (5 * 5 * 4) * 9 + 3 * 2 * (25 * 4) * 4


@pytest.mark.parametrize(
  "name, shape, rel", [("mlp", (28, 28, 1), 0.01), ("resnet20", (32, 32, 3), 0.1)]
)
def test_agrees_with_xla_cpu_cost_analysis(name, shape, rel):
  # XLA:CPU counts the same matmuls and convolutions (plus elementwise work, minus the
  # zero padding at borders), so the two agree closely where XLA sees every convolution.
  model = models.create_model(name, num_classes=10, input_shape=shape, rngs=0)
  apply_fn, variables = models.to_apply_fn(model)
  ours = costs.matmul_flops(apply_fn, variables, shape)
  x = jax.ShapeDtypeStruct((4,) + shape, jnp.float32)
  cost = jax.jit(apply_fn).lower(variables, x).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  np.testing.assert_allclose(ours, cost["flops"] / 4, rtol=rel)


def test_the_count_does_not_depend_on_the_compute_dtype_or_a_lowering():
  # What the GPU path and the CPU path report is the same number: the count comes
  # from the traced program (no backend compiles it), whatever dtype it runs in.
  model = models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=0)
  apply_fn, variables = models.to_apply_fn(model)
  f32 = costs.op_costs(apply_fn, variables, (28, 28, 1))
  bf16 = costs.op_costs(
    apply_fn,
    jax.tree.map(lambda a: a.astype(jnp.bfloat16), variables),
    (28, 28, 1),
    dtype=jnp.bfloat16,
  )
  assert f32 == bf16 and f32[0] > 5e5


@pytest.mark.parametrize("channels", [1, 2, 3])
def test_lenets_multiply_add_convolution_counts_as_the_convolution(channels):
  # LeNet's first convolution runs as multiply-adds (``models.few_channel_conv``) for few
  # input channels; the count is the one the convolution itself would give.
  shape = (28, 28, channels)
  model = models.create_model("lenet", num_classes=10, input_shape=shape, rngs=0)
  apply_fn, variables = models.to_apply_fn(model)
  flops, _ = costs.op_costs(apply_fn, variables, shape)
  conv1 = 2 * (28 * 28 * 6) * (5 * 5 * channels)  # padding 2: 28x28 outputs
  conv2 = 2 * (10 * 10 * 16) * (5 * 5 * 6)
  dense = 2 * (400 * 120 + 120 * 84 + 84 * 10)
  assert flops == conv1 + conv2 + dense
