"""What a command imports: certifying a model loads it through ``rsjax.models`` and imports
nothing of training or denoising."""

import os
import subprocess
import sys

_CERTIFY = """
import sys
from rsjax.app.cli import main
status = main(["certify", sys.argv[1], sys.argv[2], "--N0", "10", "--N", "100", "--max", "1",
               "--quiet"])
print(status)
print(" ".join(sorted(m for m in sys.modules if m.startswith("rsjax"))))
"""


def test_certify_imports_no_training_and_no_denoising(tmp_path):
  from rsjax import models

  model = models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0)
  model_dir = tmp_path / "mlp"
  models.save_model(
    model_dir,
    model,
    {
      "model": "mlp",
      "num_classes": 10,
      "input_shape": [8, 8, 1],
      "dataset": "digits",
      "sigma": 0.25,
    },
  )
  out = tmp_path / "out.tsv"
  done = subprocess.run(
    [sys.executable, "-c", _CERTIFY, str(model_dir), str(out)],
    capture_output=True,
    text=True,
    env=dict(os.environ),
    timeout=1800,
  )
  assert done.returncode == 0, done.stderr
  status, modules = done.stdout.strip().splitlines()[-2:]
  assert status == "0", done.stdout + done.stderr
  modules = modules.split()
  assert "rsjax.app.cli.certify" in modules and "rsjax.models" in modules, modules
  assert len(out.read_text().splitlines()) == 2  # the header and one row
  unwanted = [
    m
    for m in modules
    if m.startswith(
      ("rsjax.training", "rsjax.models.denoise", "rsjax.ucan.training", "rsjax.ddrs.training")
    )
  ]
  assert not unwanted, unwanted
  cli = "rsjax.app.cli."
  other_commands = [
    m
    for m in modules
    if m.startswith(cli)
    and m.removeprefix(cli) not in ("certify", "flags", "_main", "_parser", "_args")
  ]
  assert not other_commands, other_commands
