"""Build models by name (for configs and the command line)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
from flax import nnx
from jax.typing import DTypeLike

from rsjax.models._deq import DEQClassifier
from rsjax.models._mdeq import MDEQClassifier
from rsjax.models._resnet import (
  CifarResNet,
  ImageNetResNet,
  ResNet18,
  ResNet20,
  ResNet50,
  ResNet110,
)
from rsjax.models._simple import CNN, MLP, LeNet
from rsjax.models._torch_graph import TorchGraph
from rsjax.models._vit import create_vit

if TYPE_CHECKING:
  from rsjax.models._layers import NormalizeArg

__all__ = ["MODELS", "create_model"]

#: The architectures of ``create_model`` by name (the ``--model`` choices of ``rsjax train``).
MODELS: dict[str, Callable[..., nnx.Module]] = {
  "mlp": MLP,
  "cnn": CNN,
  "lenet": LeNet,
  "resnet20": ResNet20,
  "resnet110": ResNet110,
  "resnet18": ResNet18,
  "resnet50": ResNet50,
  "deq": DEQClassifier,
  "mdeq": MDEQClassifier,
  # General forms (used by converted PyTorch checkpoints): ``depth`` of a
  # CIFAR ResNet; ``block`` and ``stage_sizes`` of a torchvision ResNet.
  "cifar_resnet": CifarResNet,
  "imagenet_resnet": ImageNetResNet,
  # ViT / BEiT (``rsjax.models.VisionTransformer``; ``vit_model_config`` writes its config).
  "vit": create_vit,
}

#: Architectures a model directory is rebuilt as, never trained from scratch (not
#: ``rsjax train --model`` choices): any PyTorch module through ``torch.export``
#: (``rsjax.models.load_torch_module``; its ``graph=``).
CONVERTED: dict[str, Callable[..., nnx.Module]] = {"torch_graph": TorchGraph}

# Names used by Cohen et al.'s code (``code/architectures.py``).
_ALIASES = {"cifar_resnet20": "resnet20", "cifar_resnet110": "resnet110"}


def create_model(
  name: str,
  *,
  num_classes: int,
  input_shape: Sequence[int],
  rngs: nnx.Rngs | int | jax.Array,
  normalize: NormalizeArg = "auto",
  dtype: DTypeLike | None = None,
  **kwargs: Any,
) -> nnx.Module:
  """Builds an NNX model by name, in train mode.

  Args:
    name: one of ``MODELS`` ("mlp", "cnn", "lenet", "resnet20", "resnet110",
      "resnet18", "resnet50", "deq": ``rsjax.models.DEQClassifier``, "mdeq":
      ``rsjax.models.MDEQClassifier``; the general
      "cifar_resnet" (``depth=``) and "imagenet_resnet" (``block=``,
      ``stage_sizes=``)), or Cohen et al.'s "cifar_resnet20" / "cifar_resnet110".
    num_classes: number of output logits.
    input_shape: shape of one input, ``(H, W, C)`` for images.
    rngs: ``nnx.Rngs``, an int seed or a PRNG key, for initialization.
    normalize: "auto" (the architecture's default: CIFAR-10 statistics for
      the CIFAR ResNets, ImageNet for ResNet-50, MNIST for LeNet, none for
      "mlp" and "cnn"), ``None``, a dataset name from ``NORMALIZATION``, or a
      ``(mean, std)`` pair.
    dtype: optional computation dtype (e.g. ``jnp.bfloat16``); parameters
      stay float32.
    **kwargs: extra constructor options (e.g. ``hidden_sizes`` for "mlp").

  Returns:
    The model: ``model(x)`` maps ``[b, *input_shape]`` to ``[b, num_classes]``.
  """
  key = _ALIASES.get(name, name)
  build = MODELS.get(key) or CONVERTED.get(key)
  if build is None:
    raise ValueError(
      f"Unknown model name {name!r}; available: {sorted(MODELS) + sorted(_ALIASES)}."
    )
  if int(num_classes) < 1:
    raise ValueError(f"num_classes must be >= 1; got {num_classes}.")
  if not isinstance(rngs, nnx.Rngs):
    rngs = nnx.Rngs(rngs)
  if normalize != "auto":
    kwargs["normalize"] = normalize
  return build(
    input_shape=tuple(input_shape), num_classes=int(num_classes), dtype=dtype, rngs=rngs, **kwargs
  )
