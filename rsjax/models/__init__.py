"""Flax NNX models for randomized smoothing and their pure-function bridge.

Models take NHWC images ``[b, H, W, C]`` (the MLP: any shape) in [0, 1] and
return logits. Dataset normalization is the first layer of the model, as in
Cohen et al., so noise is added in pixel scale.

Typical use::

  model = rsjax.models.create_model("resnet110", num_classes=10,
                                    input_shape=(32, 32, 3), rngs=0)
  # ... train ``model`` (train mode) ...
  apply_fn, variables = rsjax.models.to_apply_fn(model)   # eval mode, pure
  cert = rsjax.certify(key, apply_fn, variables, x, sigma=0.25, num_classes=10)

PyTorch checkpoints of the literature (Cohen et al.'s format, torchvision
ResNets, LeNet) convert with ``from_torch`` (needs ``rsjax[torch]`` to read a
file)::

  apply_fn, variables = rsjax.models.from_torch("checkpoint.pth.tar")
"""

from rsjax.models._aux import AuxLoss as AuxLoss
from rsjax.models._aux import Diagnostic as Diagnostic
from rsjax.models._bridge import EvalApply as EvalApply
from rsjax.models._bridge import TrainApply as TrainApply
from rsjax.models._bridge import count_params as count_params
from rsjax.models._bridge import to_apply_fn as to_apply_fn
from rsjax.models._bridge import to_train_fn as to_train_fn
from rsjax.models._fold import fold_batch_norm as fold_batch_norm
from rsjax.models._layers import NORMALIZATION as NORMALIZATION
from rsjax.models._layers import Normalize as Normalize
from rsjax.models._registry import MODELS as MODELS
from rsjax.models._registry import create_model as create_model
from rsjax.models._resnet import BasicResNet as BasicResNet
from rsjax.models._resnet import CifarResNet as CifarResNet
from rsjax.models._resnet import ImageNetResNet as ImageNetResNet
from rsjax.models._resnet import ResNet18 as ResNet18
from rsjax.models._resnet import ResNet20 as ResNet20
from rsjax.models._resnet import ResNet50 as ResNet50
from rsjax.models._resnet import ResNet110 as ResNet110
from rsjax.models._simple import CNN as CNN
from rsjax.models._simple import MLP as MLP
from rsjax.models._simple import LeNet as LeNet
from rsjax.models._torch import TORCH_ARCHITECTURES as TORCH_ARCHITECTURES
from rsjax.models._torch import UnknownNormalizationError as UnknownNormalizationError
from rsjax.models._torch import from_torch as from_torch
from rsjax.models._torch import load_torch as load_torch
from rsjax.models._torch import parse_normalize as parse_normalize

__all__ = [
    "AuxLoss",
    "BasicResNet",
    "CNN",
    "CifarResNet",
    "Diagnostic",
    "EvalApply",
    "ImageNetResNet",
    "LeNet",
    "MLP",
    "MODELS",
    "NORMALIZATION",
    "Normalize",
    "ResNet110",
    "ResNet18",
    "ResNet20",
    "ResNet50",
    "TORCH_ARCHITECTURES",
    "TrainApply",
    "fold_batch_norm",
    "count_params",
    "create_model",
    "UnknownNormalizationError",
    "from_torch",
    "load_torch",
    "parse_normalize",
    "to_apply_fn",
    "to_train_fn",
]
