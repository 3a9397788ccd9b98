"""Issue 55's layout advice: LeNet-5 written NCHW, as ports from PyTorch write it, against the same
network with its convolutions channels-last, and rsjax's own LeNet (NHWC), through ``rsjax
bench``'s harness on a CPU.

    JAX_PLATFORMS=cpu python -m benchmarks.run --config benchmarks/configs/lenet_nchw.py

Figure (RESULTS.md, "Issue 55"): seconds per image at N = 10,000 (n0 100, 6 images, measured in
full) of the NCHW port as written and channels-last (``rsjax.app.bench.layout.channels_last``, the
advice ``rsjax bench`` prints), and of rsjax's LeNet. Writes
``benchmarks/results/lenet_nchw_cpu.json``.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

DN = ("NCHW", "OIHW", "NCHW")
SHAPES = {
  "k1": (6, 1, 5, 5), "b1": (6,), "k2": (16, 6, 5, 5), "b2": (16,), "w1": (400, 120),
  "c1": (120,), "w2": (120, 84), "c2": (84,), "w3": (84, 10), "c3": (10,),
}  # fmt: skip


def _pool(y: Any) -> Any:
  return lax.reduce_window(y, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def lenet_nchw(p: dict[str, Any], x: Any) -> Any:
  """LeNet-5 on ``x`` of ``[b, 1, 28, 28]`` in [0, 1] -> logits ``[b, 10]``, NCHW throughout."""
  x = (x - 0.1307) / 0.3081
  y = lax.conv_general_dilated(x, p["k1"], (1, 1), ((2, 2), (2, 2)), dimension_numbers=DN)
  y = _pool(jax.nn.relu(y + p["b1"][None, :, None, None]))
  y = lax.conv_general_dilated(y, p["k2"], (1, 1), "VALID", dimension_numbers=DN)
  y = _pool(jax.nn.relu(y + p["b2"][None, :, None, None])).reshape(x.shape[0], -1)
  y = jax.nn.relu(jax.nn.relu(y @ p["w1"] + p["c1"]) @ p["w2"] + p["c2"])
  return y @ p["w3"] + p["c3"]


def target(arm: dict[str, Any]) -> Any:
  """The arm's model for ``rsjax.app.bench.bench``."""
  from rsjax import models
  from rsjax.app.bench import Target

  if arm["name"] == "rsjax lenet":
    model = models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=0)
    apply_fn, params = models.to_apply_fn(model)
    return Target("lenet", "rsjax.models (NHWC)", apply_fn, params, (28, 28, 1), 10, 0.25)
  rng = np.random.default_rng(0)
  params = {k: jnp.asarray(rng.normal(size=s) * 0.1, jnp.float32) for k, s in SHAPES.items()}
  return Target("lenet-nchw", "a port written NCHW", lenet_nchw, params, (1, 28, 28), 10, 0.25)


def get_config() -> dict:
  return {
    "workload": "LeNet-5, random weights, uniform random images, sigma 0.25, float32",
    "arms": [{"name": "nchw port"}, {"name": "rsjax lenet"}],
    "measures": ["s/image as written", "s/image channels-last (the advice)", "samples/s"],
    "bench": {"target_n": 10_000, "full": True, "n0": 100, "images": 6, "batch": 1000},
    "json": "benchmarks/results/lenet_nchw_cpu.json",
  }
