"""With bfloat16 compute, every convolution and matmul of the denoised classifier runs in bf16.

The engine casts the noisy input and every floating parameter to bfloat16 (``cast_floating``);
this reads the jaxpr of the composed classifier (one-step diffusion denoiser + classifier) and
counts ``conv_general_dilated`` / ``dot_general`` by operand dtype.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jaxpr_ops import matmul_eqns

from rsjax.engine.step import cast_floating
from rsjax.models import ResNet20, VisionTransformer, ViTConfig
from rsjax.models.denoise import denoised, diffusion
from rsjax.models.denoise.openai_unet import OpenAIUNet, OpenAIUNetConfig
from rsjax.models.denoise.unet import UNet2DModel, UNetConfig


def count_ops(jaxpr):
  """``{(primitive, lhs dtype, rhs dtype): n}`` over a jaxpr and its sub-jaxprs."""
  return collections.Counter(
    (e.primitive.name, *(str(v.aval.dtype) for v in e.invars[:2])) for e in matmul_eqns(jaxpr)
  )


def denoisers():
  ddpm = UNet2DModel(
    UNetConfig(block_out_channels=(16, 32), norm_num_groups=8, layers_per_block=1), rngs=0
  )
  openai = OpenAIUNet(
    OpenAIUNetConfig(
      model_channels=32,
      out_channels=6,
      num_res_blocks=1,
      channel_mult=(1, 2),
      attention_resolutions=(2,),
      num_head_channels=32,
      resblock_updown=True,
    ),
    rngs=0,
  )
  return {"diffusers": (ddpm, 1.0, None), "openai": (openai, 0.25, 3)}


@pytest.mark.heavy
@pytest.mark.parametrize("which", ["diffusers", "openai", "openai+vit"])
def test_bf16_runs_every_conv_and_matmul_in_bf16(which):
  model, scale, eps_channels = denoisers()[which.split("+")[0]]
  fn, d_params = diffusion.one_step_denoiser(
    model,
    sigma=0.25,
    alphas_cumprod=diffusion.cosine_schedule(4000),
    timestep_scale=scale,
    eps_channels=eps_channels,
  )
  if which.endswith("vit"):  # Carlini et al.'s pipeline in small: resize, then a ViT
    vit = VisionTransformer(
      ViTConfig(
        image_size=16,
        patch_size=4,
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=2,
        intermediate_size=64,
        num_labels=10,
      ),
      rngs=0,
    )
    apply_fn, params = denoised(fn, vit, denoiser_params=d_params, resize=(16, 16))
  else:
    clf = ResNet20(input_shape=(8, 8, 3), rngs=nnx.Rngs(0))
    apply_fn, params = denoised(fn, clf, denoiser_params=d_params)
  x = jax.random.uniform(jax.random.key(1), (2, 8, 8, 3))
  counts32 = count_ops(jax.make_jaxpr(apply_fn)(params, x).jaxpr)
  p16, x16 = cast_floating(params, jnp.bfloat16), x.astype(jnp.bfloat16)
  counts16 = count_ops(jax.make_jaxpr(apply_fn)(p16, x16).jaxpr)
  n = sum(counts32.values())
  assert counts32 == {k: v for k, v in counts32.items() if k[1:] == ("float32", "float32")}
  assert n > 20 and sum(counts16.values()) == n
  not_bf16 = {k: v for k, v in counts16.items() if k[1:] != ("bfloat16", "bfloat16")}
  assert not not_bf16, not_bf16
  # The error of bf16 against float32: the logits of the composed classifier.
  want = np.asarray(jax.jit(apply_fn)(params, x))
  got = np.asarray(jax.jit(apply_fn)(p16, x16), np.float32)
  rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
  print(f"{which}: {n} convs/matmuls in bf16; logits max rel. error vs float32 {rel:.3g}")
  assert rel < 0.1, rel
