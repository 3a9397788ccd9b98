"""A PyTorch state dict into an NNX model: the one loop every importer shares.

Layouts are converted per module: a conv kernel OIHW -> HWIO, a linear weight ``(out, in)`` ->
``(in, out)`` (a 1x1 convolution's weight, ``(out, in, 1[, 1])``, counts as linear), a norm's
``weight`` -> ``scale``. Every tensor must find its parameter and every parameter a tensor, with
the same shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax.numpy as jnp
import numpy as np
from flax import nnx

__all__ = ["float32_array", "load_torch_state", "read_weights"]

M = TypeVar("M", bound=nnx.Module)


def float32_array(value: Any) -> np.ndarray:
  """A torch tensor or array-like as a float32 NumPy array."""
  if hasattr(value, "detach"):  # a torch tensor
    value = value.detach().cpu().float().numpy()
  return np.asarray(value, np.float32)


def read_weights(path: str) -> Mapping[str, Any]:
  """The state dict of a weight file: ``.safetensors`` (read with safetensors), ``.npz``
  (NumPy) or else a PyTorch file (read with ``torch.load``, which needs torch)."""
  if path.endswith(".safetensors"):
    from safetensors.numpy import load_file

    return load_file(path)
  if path.endswith(".npz"):
    return dict(np.load(path))
  import torch

  return torch.load(path, map_location="cpu", weights_only=True)


def load_torch_state(
  model: M,
  state_dict: Mapping[str, Any],
  locate: Callable[[str], tuple[nnx.Module, str] | None],
  *,
  source: str,
  hint: str = "",
  plain_params: bool = False,
) -> M:
  """Loads ``state_dict`` into ``model`` (in place; also returned).

  Args:
    model: the NNX model (e.g. from ``nnx.eval_shape``: every parameter is set here).
    state_dict: ``{torch name: tensor}``.
    locate: ``locate(key) -> (module, leaf)``, the module a key names and its leaf
      (``weight``, ``bias``, ...); None skips the key; AttributeError, IndexError or
      TypeError: no such module.
    source: the checkpoint's kind, for messages (``"diffusers weight"``).
    hint: appended to the messages (``" (other flags?)"``).
    plain_params: a key may name a plain ``nnx.Param`` of another module by its leaf
      (ViT's class token, position embeddings).

  Raises:
    ValueError: a tensor with no parameter, of another shape, or a parameter left unset.
  """
  target = type(model).__name__
  seen = set()
  for key, value in state_dict.items():
    try:
      found = locate(key)
    except (AttributeError, IndexError, TypeError):
      raise ValueError(f"{source} {key!r} has no parameter in the NNX {target}{hint}") from None
    if found is None:
      continue
    module, leaf = found
    w = float32_array(value)
    if isinstance(module, nnx.Conv):
      name, w = ("kernel", w.transpose(2, 3, 1, 0)) if leaf == "weight" else ("bias", w)
    elif isinstance(module, nnx.Linear):
      if leaf == "weight" and w.ndim > 2 and all(d == 1 for d in w.shape[2:]):
        w = w.reshape(w.shape[:2])
      name, w = ("kernel", w.T) if leaf == "weight" else ("bias", w)
    elif isinstance(module, (nnx.GroupNorm, nnx.LayerNorm)):
      name = "scale" if leaf == "weight" else "bias"
    elif plain_params and isinstance(getattr(module, leaf, None), nnx.Param):
      name = leaf
    else:
      raise ValueError(f"{source} {key!r} has no parameter in the NNX {target}{hint}")
    param = getattr(module, name, None)
    if param is None or tuple(param.shape) != w.shape:
      shape = None if param is None else tuple(param.shape)
      raise ValueError(
        f"{source} {key!r} has shape {w.shape} after conversion, the NNX parameter {shape}{hint}"
      )
    param.set_value(jnp.asarray(w, param.dtype))
    seen.add((id(module), name))
  expected = {
    (id(m), n)
    for _, m in nnx.iter_modules(model)
    for n, v in vars(m).items()
    if isinstance(v, nnx.Param)
  }
  if missing := len(expected - seen):
    raise ValueError(
      f"the state dict leaves {missing} of the NNX model's {len(expected)} parameters unset{hint}"
    )
  return model
