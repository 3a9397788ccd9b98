"""The NNX ports against stored outputs of OpenAI's UNetModel and transformers' ViT/BEiT.

Runs without torch (``tests/reference_outputs.py`` explains the stored file); where the
reference packages are installed, the stored outputs are checked against them too.
"""

import importlib.util

import jax
import numpy as np
import pytest
import reference_outputs as ref  # tests/ is on sys.path (pytest rootdir conftest)
from flax import nnx

from rsjax import models
from rsjax.models.denoise import openai_import


def nnx_output(case: str) -> np.ndarray:
  names, shapes, _, config = ref.load(case)
  state = ref.seeded_state(names, shapes)
  arrays = ref.inputs(case)
  if case.startswith("openai"):
    model, _ = openai_import.load_openai(state, config)
    graphdef, params = nnx.split(model)
    fn = jax.jit(lambda p, x, t: nnx.merge(graphdef, p)(x, t, full=True))
    s = ref.STRIDE.get(case, 1)
    return np.asarray(fn(params, arrays["x"], arrays["t"]))[:, ::s, ::s]
  vit_config = models.vit_config_from_transformers(config)
  shapes_only = nnx.eval_shape(lambda: models.VisionTransformer(vit_config, rngs=nnx.Rngs(0)))
  model = models.load_transformers_state_dict(shapes_only, state)
  graphdef, params = nnx.split(model)
  return np.asarray(jax.jit(lambda p, x: nnx.merge(graphdef, p)(x))(params, arrays["x"]))


@pytest.mark.parametrize("case", ref.CASES)
def test_nnx_ports_match_the_stored_reference_outputs(case):
  want = ref.load(case)[2]
  got = nnx_output(case)
  assert got.shape == want.shape and np.std(want) > 0.3
  assert np.max(np.abs(got - want)) <= 1e-4, np.max(np.abs(got - want))


def _have(module: str) -> bool:
  try:
    return importlib.util.find_spec(module) is not None
  except (ImportError, ValueError):
    return False


@pytest.mark.parametrize("case", ref.CASES)
def test_the_stored_outputs_are_the_references(case):
  torch = pytest.importorskip("torch")
  package = "guided_diffusion" if case.startswith("openai") else "transformers"
  if not _have(package):
    pytest.skip(f"{package} is not installed")
  names, shapes, want, _ = ref.load(case)
  model = ref.reference_model(case)
  sd = model.state_dict()
  assert [k for k in sd if not k.endswith("relative_position_index")] == names
  state = ref.seeded_state(names, shapes)
  model.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
  got = ref.reference_output(case, model)
  assert np.max(np.abs(got - want)) <= 1e-4


def test_openai_directory_with_npz_weights_is_a_denoiser(tmp_path):
  """An OpenAI checkpoint saved as .npz beside openai_flags.json certifies without torch."""
  import json

  from rsjax.models.denoise import workdir

  names, shapes, want, config = ref.load("openai_cifar10")
  np.savez(tmp_path / "weights.npz", **ref.seeded_state(names, shapes))
  flags_file = tmp_path / openai_import.FLAGS_FILE
  flags_file.write_text(json.dumps({**config, "checkpoint": "weights.npz"}))
  fn, params, info = workdir.denoiser_fn(tmp_path, sigma=0.25)
  assert info["kind"] == "openai" and fn.t == 1158 and fn.timestep_scale == 0.25
  y = np.full((1, 32, 32, 3), 0.5, np.float32)
  x0 = np.asarray(jax.jit(fn)(params, y))
  assert x0.shape == y.shape and np.all((x0 >= 0) & (x0 <= 1))
  flags_file.write_text(json.dumps({**config, "checkpoint": "missing.npz"}))
  with pytest.raises(FileNotFoundError, match="missing.npz"):
    workdir.denoiser_fn(tmp_path, sigma=0.25)
