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

A model directory (``config.json`` and checkpoints, what ``rsjax train`` and
``rsjax convert`` write and ``rsjax certify`` reads) is written with ``save_model``
and read back with ``load_model`` (``_directory``)::

  rsjax.models.save_model("model_dir", model, {"model": "lenet", "num_classes": 10,
                                               "input_shape": [28, 28, 1]})
  model, config = rsjax.models.load_model("model_dir")

Two opt-in inference transforms return a new model computing the same function up to
rounding: ``fold_batch_norm`` (``_fold``: eval-mode batch norm folded into the convolutions)
and ``pack_narrow_stage`` (``_pack``: a CIFAR ResNet's 16-channel stage run on 2 or 4
samples packed in the channel axis, ``PackedResNet``).

Deep equilibrium models (``create_model("deq")``, ``"mdeq"``) and their fixed-point
solvers are here too:

* ``_solvers``: batched fixed-point solvers with a static step count
  (``fixed_point_iteration``, ``anderson``, ``broyden``; ``solve`` with a
  ``SolverConfig`` or a paper label such as ``"30A"``, ``"3B"``, ``"1N"``),
  per-sample residuals, warm starts.
* ``_implicit``: ``implicit_fixed_point`` (the fixed point with an implicit
  gradient, custom VJP) and the Hutchinson Jacobian regularizer.
* ``_deq``: a single-scale convolutional DEQ classifier and its pure functions
  (``DEQForward`` with warm starts, ``DEQApply`` for the core engine).
* ``_mdeq``: a two-resolution MDEQ-style classifier (``MDEQClassifier``) on the
  same ``DEQModel`` base.

Their certification (SRS, Gao et al. 2024) is ``rsjax.srs``.

Any other PyTorch ``nn.Module`` whose forward ``torch.export`` captures runs as it is
(``_torch_export``: ``from_torch_module``, ``load_torch_module``): its Core ATen graph is
interpreted with ``jax.lax`` (``_aten``: one rule per operator; ``_torch_graph``:
``TorchGraph``)::

  apply_fn, params = rsjax.models.from_torch_module(net, torch.rand(1, 3, 32, 32))

ViT and BEiT classifiers (``_vit``: ``VisionTransformer``; ``create_model("vit")``) import
Hugging Face transformers weights (``_vit_import``: ``vit_from_transformers``,
``load_transformers_state_dict``, ``vit_model_config`` for a model directory).
"""

from rsjax.models._aux import AuxLoss as AuxLoss
from rsjax.models._aux import Diagnostic as Diagnostic
from rsjax.models._bridge import EvalApply as EvalApply
from rsjax.models._bridge import TrainApply as TrainApply
from rsjax.models._bridge import count_params as count_params
from rsjax.models._bridge import to_apply_fn as to_apply_fn
from rsjax.models._bridge import to_train_fn as to_train_fn
from rsjax.models._children import bfloat16_weights as bfloat16_weights
from rsjax.models._children import fold_batch_norm_weights as fold_batch_norm_weights
from rsjax.models._children import prune_magnitude as prune_magnitude
from rsjax.models._children import quantize_int8 as quantize_int8
from rsjax.models._children import save_child as save_child
from rsjax.models._deq import DEQApply as DEQApply
from rsjax.models._deq import DEQCell as DEQCell
from rsjax.models._deq import DEQClassifier as DEQClassifier
from rsjax.models._deq import DEQForward as DEQForward
from rsjax.models._deq import DEQModel as DEQModel
from rsjax.models._deq import make_apply_fn as make_apply_fn
from rsjax.models._deq import to_deq_fn as to_deq_fn
from rsjax.models._directory import CHECKPOINT_DIR as CHECKPOINT_DIR
from rsjax.models._directory import CONFIG_FILE as CONFIG_FILE
from rsjax.models._directory import load_model as load_model
from rsjax.models._directory import read_config as read_config
from rsjax.models._directory import restore_model as restore_model
from rsjax.models._directory import save_model as save_model
from rsjax.models._directory import write_checkpointed as write_checkpointed
from rsjax.models._directory import write_config as write_config
from rsjax.models._fold import fold_batch_norm as fold_batch_norm
from rsjax.models._implicit import implicit_fixed_point as implicit_fixed_point
from rsjax.models._implicit import jacobian_frobenius_sq as jacobian_frobenius_sq
from rsjax.models._layers import NORMALIZATION as NORMALIZATION
from rsjax.models._layers import Normalize as Normalize
from rsjax.models._mdeq import MDEQCell as MDEQCell
from rsjax.models._mdeq import MDEQClassifier as MDEQClassifier
from rsjax.models._pack import PackedResNet as PackedResNet
from rsjax.models._pack import pack_batch as pack_batch
from rsjax.models._pack import pack_narrow_stage as pack_narrow_stage
from rsjax.models._pack import unpack_batch as unpack_batch
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
from rsjax.models._simple import few_channel_conv as few_channel_conv
from rsjax.models._solvers import SOLVERS as SOLVERS
from rsjax.models._solvers import SolverConfig as SolverConfig
from rsjax.models._solvers import SolverResult as SolverResult
from rsjax.models._solvers import anderson as anderson
from rsjax.models._solvers import as_solver_config as as_solver_config
from rsjax.models._solvers import broyden as broyden
from rsjax.models._solvers import fixed_point_iteration as fixed_point_iteration
from rsjax.models._solvers import relative_residual as relative_residual
from rsjax.models._solvers import solve as solve
from rsjax.models._torch import TORCH_ARCHITECTURES as TORCH_ARCHITECTURES
from rsjax.models._torch import UnknownNormalizationError as UnknownNormalizationError
from rsjax.models._torch import from_torch as from_torch
from rsjax.models._torch import load_torch as load_torch
from rsjax.models._torch import parse_normalize as parse_normalize
from rsjax.models._torch_export import from_torch_module as from_torch_module
from rsjax.models._torch_export import load_module as load_module
from rsjax.models._torch_export import load_torch_module as load_torch_module
from rsjax.models._torch_graph import TorchGraph as TorchGraph
from rsjax.models._torch_graph import UnsupportedOperatorError as UnsupportedOperatorError
from rsjax.models._vit import VisionTransformer as VisionTransformer
from rsjax.models._vit import ViTConfig as ViTConfig
from rsjax.models._vit_import import load_transformers_state_dict as load_transformers_state_dict
from rsjax.models._vit_import import vit_config_from_transformers as vit_config_from_transformers
from rsjax.models._vit_import import vit_from_transformers as vit_from_transformers
from rsjax.models._vit_import import vit_model_config as vit_model_config

#: Every name imported above.
__all__ = sorted(name for name in dir() if not name.startswith("_"))
