"""Certificates beyond additive noise, by ablation (Levine and Feizi 2020): patches by
derandomized smoothing (``--method patch``) and L0 by randomized ablation (``--method
ablation``).

* ``_ablate``: the paper's encoding (``(x, 1 - x)`` at kept pixels, 0 at ablated ones), the
  kept bands and blocks, the kept pixels drawn from ``fold_in(fold_in(key, i), j)``, and the
  counts of a classifier of encoded images on device.
* ``_rules``: the certificates from the counts (the patch rule with its tie to the smaller
  class, the L0 radius in exact fractions).
* ``_certify``: the certifiers ``Patch`` and ``L0Ablation`` (``rsjax.certify(certifier=...)``).
* ``_band``: a speed path of ``certify_patch`` for a LeNet and column or row bands: its first
  convolution computed only near each band (elsewhere it is its bias), the same counts.
* ``_tokens``: token dropping with a ViT (Salman et al. 2022): the counts of
  ``patch_counts`` with only the kept region's patch tokens through the transformer.
* ``_check``: ``rsjax verify``'s half; ``method``: the two ``Method`` values.
* ``training``: ``rsjax train --method patch`` / ``ablation`` (a fresh ablation per example
  and epoch).

Names are imported on first use (``rsjax.ablation.method`` imports no JAX).
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "L0_METHOD": "rsjax.ablation.method",
    "PATCH_METHOD": "rsjax.ablation.method",
    "ENCODING": "rsjax.ablation._check",
    "check_l0": "rsjax.ablation._check",
    "check_patch": "rsjax.ablation._check",
    "ABLATIONS": "rsjax.ablation._certify",
    "L0Ablation": "rsjax.ablation._certify",
    "Patch": "rsjax.ablation._certify",
    "PatchCertificate": "rsjax.ablation._certify",
    "certify_patch": "rsjax.ablation._certify",
    "encode": "rsjax.ablation._ablate",
    "encoded_shape": "rsjax.ablation._ablate",
    "kept_pixels": "rsjax.ablation._ablate",
    "l0_counts": "rsjax.ablation._ablate",
    "patch_counts": "rsjax.ablation._ablate",
    "position_masks": "rsjax.ablation._ablate",
    "l0_radius": "rsjax.ablation._rules",
    "MaskedApply": "rsjax.ablation._tokens",
    "TokenApply": "rsjax.ablation._tokens",
    "to_masked_apply": "rsjax.ablation._tokens",
    "kept_tokens": "rsjax.ablation._tokens",
    "position_tokens": "rsjax.ablation._tokens",
    "to_token_apply": "rsjax.ablation._tokens",
    "token_counts": "rsjax.ablation._tokens",
    "patch_delta": "rsjax.ablation._rules",
    "patch_radius": "rsjax.ablation._rules",
  },
)
