"""Issue 71's speed side by side: PyTorch modules written in plain PyTorch (a WideResNet-16-4 and
a small ViT, ``tests/torch_user_models.py``), converted as they are
(``rsjax.models.load_torch_module``: their ``torch.export`` graph run in JAX), against the eager
modules themselves as the twin (``rsjax bench --twin``'s tuned twin: noise on the device,
channels-last, counts on the device), at the same batch, through ``rsjax bench``'s harness on a
CPU.

    JAX_PLATFORMS=cpu python -m benchmarks.run --config benchmarks/configs/torch_module.py

Figure (docs/guides/torch-module.md, "Speed"): certified samples per second of each model,
rsjax's and the eager twin's at batch 100 (``twin/0/eager/rsjax_speedup``), one process, the
two sides timed in turn. Writes ``benchmarks/results/torch_module_cpu.json``.
"""

import pathlib
import sys
from typing import Any

#: The models of the arms: ``(class name, constructor keyword arguments)``.
MODELS = {
  "wide_resnet_16_4": ("WideResNet", {"depth": 16, "widen": 4}),
  "vit": ("ViT", {"size": 32, "patch": 4, "dim": 64, "depth": 2, "heads": 4}),
}


def target(arm: dict[str, Any]) -> Any:
  """The arm's converted module for ``rsjax.app.bench.bench``, the module itself its twin."""
  import torch

  from rsjax import models
  from rsjax.app.bench import Target

  tests = str(pathlib.Path(__file__).resolve().parents[2] / "tests")
  if tests not in sys.path:
    sys.path.insert(0, tests)
  import torch_user_models as um

  cls, kwargs = MODELS[arm["name"]]
  torch.manual_seed(0)
  module = um.randomize_stats_(getattr(um, cls)(**kwargs))
  model, config = models.load_torch_module(module, torch.rand(2, 3, 32, 32))
  apply_fn, params = models.to_apply_fn(model)
  kind = f"PyTorch module (torch.export), graph {config['graph_digest'][:12]}"
  return Target(arm["name"], kind, apply_fn, params, (32, 32, 3), 10, 0.25, model=module)


def get_config() -> dict:
  return {
    "workload": "random weights and BatchNorm statistics, uniform random 32x32 RGB images, "
    "sigma 0.25, float32",
    "arms": [{"name": "wide_resnet_16_4"}, {"name": "vit"}],
    "measures": ["samples/s of rsjax", "samples/s of the eager module", "rsjax's speed-up"],
    "bench": {
      "target_n": 100_000,
      "measure_n": 200,
      "n0": 100,
      "images": 1,
      "batch": 100,
      "twin": True,
      "twin_compile": "none",
    },
    "json": "benchmarks/results/torch_module_cpu.json",
  }
