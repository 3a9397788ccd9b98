"""``rsjax.app.bench.layout``: the convolutions of a model by layout, the same network
channels-last (same numbers), and the advice ``rsjax bench`` gives an NCHW model on a CPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from rsjax import models
from rsjax.app.bench import Request, Target, bench, layout, report

# A test of the tools around the library: .ci/run runs it in the py311 stage only.
pytestmark = pytest.mark.tools


def _nchw_net(params, x):
  """A small LeNet as PyTorch ports write it: ``x`` of ``[b, 1, 12, 12]``, NCHW convolutions
  with OIHW kernels, bias broadcast over the channel axis, max pooling, a global mean, an
  NCHW flatten and a matmul."""
  dn = ("NCHW", "OIHW", "NCHW")
  y = lax.conv_general_dilated(x, params["k1"], (1, 1), "SAME", dimension_numbers=dn)
  y = jax.nn.relu(y + params["b1"][None, :, None, None])
  y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
  y = jnp.tanh(lax.conv_general_dilated(y, params["k2"], (1, 1), "VALID", dimension_numbers=dn))
  flat = y.reshape(y.shape[0], -1)  # [b, 5 * 4 * 4] in NCHW order
  return flat @ params["w"] + y.mean(axis=(2, 3)) @ params["v"]


def _params():
  rng = np.random.default_rng(0)
  shapes = {"k1": (4, 1, 3, 3), "b1": (4,), "k2": (5, 4, 3, 3), "w": (80, 3), "v": (5, 3)}
  return {k: jnp.asarray(rng.normal(size=s) * 0.5, jnp.float32) for k, s in shapes.items()}


def test_convolutions_are_counted_by_layout():
  assert layout.conv_layouts(_nchw_net, _params(), (1, 12, 12)) == {"NCHW": 2}
  lenet = models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=0)
  apply_fn, params = models.to_apply_fn(lenet)
  # rsjax's LeNet: conv1 (1 -> 6 channels) is 25 shifted products, conv2 a convolution
  assert layout.conv_layouts(apply_fn, params, (28, 28, 1)) == {"NHWC": 1}


def test_channels_last_is_the_same_function_with_nhwc_convolutions():
  params = _params()
  x = jnp.asarray(np.random.default_rng(1).random((3, 1, 12, 12)), jnp.float32)
  fn = layout.channels_last(_nchw_net)
  np.testing.assert_allclose(jax.jit(fn)(params, x), _nchw_net(params, x), rtol=1e-5, atol=1e-5)
  assert layout.conv_layouts(fn, params, (1, 12, 12)) == {"NHWC": 2}
  text = str(jax.make_jaxpr(fn)(params, x))
  assert "window_dimensions=(1, 2, 2, 1)" in text  # the pooling runs channels-last too


def test_an_nchw_model_is_told_nhwc_with_both_figures(capsys):
  """The advice is printed with both measured seconds, whichever is faster (no timing is
  asserted: on a loaded machine either may win on a model this small)."""
  target = Target(
    name="nchw-net",
    kind="apply_fn",
    apply_fn=_nchw_net,
    params=_params(),
    input_shape=(1, 12, 12),
    num_classes=3,
    sigma=0.25,
  )
  request = Request(target_n=1000, measure_n=64, n0=16, images=1)
  doc = bench(target, request, log=lambda s: None)
  advice = doc["layout"]
  assert advice["convs"] == {"NCHW": 2} and advice["images"] == 1
  assert advice["as_written_s"] > 0 and advice["channels_last_s"] > 0
  line = report.layout_line(advice)
  assert line in report.lines(doc)
  for seconds in (advice["as_written_s"], advice["channels_last_s"]):
    assert f"{report._num(seconds)} s/image" in line
  assert "2 of the model's convolutions are channels-first" in line


@pytest.mark.parametrize("name", ["lenet"])
def test_an_nhwc_model_gets_no_advice(name):
  model = models.create_model(name, num_classes=10, input_shape=(28, 28, 1), rngs=0)
  apply_fn, params = models.to_apply_fn(model)
  target = Target(name, "architecture", apply_fn, params, (28, 28, 1), 10, 0.25)
  request = Request(target_n=100, measure_n=16, n0=16, images=1)
  assert bench(target, request, log=lambda s: None)["layout"] is None
