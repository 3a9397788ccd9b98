"""Every shell block of the README runs as written, at a small size, in order, in one directory.

A block runs in bash (``set -e``) with ``rsjax`` and ``python`` on the PATH. Sizes shrink
here, flag by flag (``_small``: 1 epoch, N <= 64, a few inputs), so the README cannot drift
from the code: a renamed flag, a missing step or a wrong path fails the test. The blocks
that need what a test machine does not have are listed in ``_NOT_RUN`` with the reason, and
each entry must match exactly one block. Python blocks run too (the training one shrunk).
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

# A test of the tools around the library: .ci/run runs it in the py311 stage only.
pytestmark = pytest.mark.tools

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# A distinctive piece of each block that is not run -> why.
_NOT_RUN = {
  'pip install ".[torch]"': "installs the package (.ci/run's wheel stage installs it so and "
  "runs the command from it; test_the_install_lines_are_what_ci_installs)",
  'pip install -e ".[dev]"\npython -m pytest': "installs the package and runs this suite",
  "python docs/build.py --serve": "installs the docs tools and serves the site until stopped "
  "(tests/test_docs_site.py tests the built site; the site's executed pages run when it is built)",
}

# Flags set to a small value (added when absent: the key of _ADD).
_SHRINK = {
  "train": {"--epochs": 1},
  "train-denoiser": {"--epochs": 1},
  "certify": {"--N": 64, "--N0": 16, "--ddrs-steps": 3, "--max": 25},
  "demo": {"--epochs": 1, "--N": 64, "--images": 3},
  "bench": {"--measure-n": 64, "--images": 1},
}
_ADD = {
  "train": {"--epochs"},
  "train-denoiser": {"--epochs"},
  "certify": {"--N", "--N0", "--max"},
  "demo": {"--epochs", "--N", "--images"},
  "bench": {"--measure-n", "--images"},
}


def _blocks(lang: str) -> list[str]:
  return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def _small(line: str) -> str:
  """A command line of the README with the sizes of ``_SHRINK`` (others unchanged)."""
  words = shlex.split(line, comments=True)
  if words[:1] == ["rsjax"]:
    at = 1
  elif words[:3] == ["python", "-m", "rsjax"]:
    at = 3
  else:
    return line
  command = words[at]
  for flag, value in _SHRINK.get(command, {}).items():
    if flag in words:
      i = words.index(flag) + 1
      words[i] = str(min(int(float(words[i])), value))
    elif flag in _ADD.get(command, ()):
      words += [flag, str(value)]
  return shlex.join(words)


def _script(block: str) -> str:
  lines = re.sub(r"\\\n\s*", " ", block).splitlines()  # join continued lines
  return (
    "set -e\n"
    + "\n".join(_small(x) if x.strip() and not x.lstrip().startswith("#") else x for x in lines)
    + "\n"
  )


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
  """Runs a script in one working directory with ``rsjax`` and ``python`` on the PATH."""
  work = tmp_path_factory.mktemp("readme")
  bin_dir = work / "bin"
  bin_dir.mkdir()
  # Scripts, not symlinks: a virtual environment's python started through a link that lives
  # outside the environment does not find the environment (its pyvenv.cfg) nor its packages.
  for name, args in (("python", ""), ("rsjax", " -m rsjax")):
    exe = bin_dir / name
    exe.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)}{args} "$@"\n')
    exe.chmod(0o755)
  env = dict(
    os.environ,
    PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
  )

  def run(script: str, what: str) -> str:
    out = subprocess.run(
      ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=1800
    )
    assert out.returncode == 0, (
      f"README {what} failed (status {out.returncode}):\n{script}\n"
      f"--- stdout\n{out.stdout[-3000:]}\n--- stderr\n"
      f"{out.stderr[-3000:]}"
    )
    return out.stdout

  return run


def test_the_install_lines_are_what_ci_installs():
  """The README's user line is the plain package, as .ci/run's wheel stage installs it (then
  runs the command from it); the developer line is the suites'; every extra named exists; the
  install guide says the same."""
  import tomllib

  setup = _blocks("bash")[0].splitlines()
  assert [x.split("#")[0].strip() for x in setup[1:]] == ["pip install .", 'pip install ".[torch]"']
  ci = (ROOT / ".ci" / "run").read_text()
  wheel = ci[ci.index("stage_wheel()") :]
  wheel = wheel[: wheel.index("\n}\n")]
  assert '-m pip install --quiet "$work/"' in wheel and "rsjax certify" in wheel
  assert ci.count('-m pip install --quiet -e ".[dev]"') == 2  # py311 and py312
  extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
  assert {"torch", "dev"} <= set(extras) and extras["torch"] == ["torch>=2.4"]
  guide = (ROOT / "docs" / "guides" / "install.md").read_text()
  for line in ("pip install .", 'pip install ".[torch]"', 'pip install -e ".[dev]"'):
    assert line in README.read_text() and line in guide, line
  assert "download.pytorch.org/whl/cpu" in guide


def test_the_not_run_list_matches_one_block_each():
  blocks = _blocks("bash")
  for piece in _NOT_RUN:
    assert sum(piece in b for b in blocks) == 1, piece


def test_small_keeps_the_command_and_shrinks_its_sizes():
  assert _small("rsjax certify a b --N0 100 --N 10000 --skip 5") == (
    "rsjax certify a b --N0 16 --N 64 --skip 5 --max 25"
  )
  assert _small("rsjax certify a b --N 6000") == "rsjax certify a b --N 64 --N0 16 --max 25"
  assert _small("python -m rsjax train --dataset d --epochs 20 --out o") == (
    "python -m rsjax train --dataset d --epochs 1 --out o"
  )
  assert (
    _small("rsjax analyze f.tsv --radii 0 0.5  # two radii") == "rsjax analyze f.tsv --radii 0 0.5"
  )
  assert _small("ls runs") == "ls runs"


@pytest.mark.slow
def test_every_readme_block_runs(shell):
  ran = 0
  for i, block in enumerate(_blocks("bash")):
    if any(piece in block for piece in _NOT_RUN):
      continue
    shell(_script(block), f"shell block {i + 1}")
    ran += 1
  assert ran >= 2  # the demo and verify (the long commands run as executed pages of the site)
  for i, block in enumerate(_blocks("python")):
    if "training.train(" in block:  # the ten lines: 1 epoch, 3 images, N0 16, N 64
      for big, small in (
        ("epochs=10", "epochs=1"),
        ("range(100)", "range(3)"),
        ("n0=100, n=10_000", "n0=16, n=64"),
      ):
        assert big in block, big
        block = block.replace(big, small)
    shell(f"python - <<'PY'\n{block}PY\n", f"python block {i + 1}")
