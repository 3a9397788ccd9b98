"""Issue 44: k images in one call against k single-image calls and Cohen et al.'s per-image loop.

    python -m benchmarks.run --config benchmarks/configs/per_image.py

Figure (RESULTS.md, "Issue 44"; 2-core CPU, printed, no JSON kept): per-image cost over (model,
images per call, batch), rsjax against the plain-JAX loop of ``benchmarks.twins.ReferenceLoop``. The
certify table: ``--set args.mode=certify --set args.models=mlp,lenet --set args.images=1,6,16``.
"""


def get_config() -> dict:
  return {
    "workload": "random weights, one to 32 images per call, several batch sizes",
    "arms": ["rsjax, k images per call", "the per-image loop in plain JAX"],
    "measures": ["wall and CPU s per image"],
    "call": "benchmarks.calls.per_image",
    "args": {},
    "json": "runs/per_image.json",
  }
