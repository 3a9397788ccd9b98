"""One image through `rsjax certify`: which modules its path opens, and that it never climbs back.

The path of one image starts when the runner fetches it (the dataset's
``get_batch``) and ends with its written row: the sampling, the certificate
and the row's record on the way. A subprocess runs ``rsjax certify`` on one
image under ``sys.setprofile`` and reports, in the order first entered, the
rsjax modules whose functions run on that path, except the classifier's own
(the model zoo, ``rsjax.models``: the network the user trained), and every
climb back: a call into a module that is already on the call stack below a
frame of another module (``A -> B -> A``, a callback threaded back up).
docs/ARCHITECTURE.md draws the same path.
"""

import json
import subprocess
import sys

MAX_MODULES = 15  # 14, and rsjax._lazy since SciPy loads on first use (issue 69)

TRACE = r"""
import json, os, sys
import rsjax
from rsjax.app.cli import _parser, certify
root = os.path.dirname(rsjax.__file__)
args = _parser.build_parser().parse_args(sys.argv[1:])
order, climbs, active = [], [], [False]


def module_of(frame):
  f = frame.f_code.co_filename
  if not f.startswith(root) or frame.f_code.co_name == "<module>":
    return None
  return os.path.relpath(f, os.path.dirname(root))[:-3].replace(os.sep, ".").removesuffix(
      ".__init__")


def profile(frame, event, arg):
  if event != "call":
    return
  m = module_of(frame)
  if m is None:
    return
  if not active[0]:
    if frame.f_code.co_name != "get_batch":
      return
    active[0] = True
  if m.startswith("rsjax.models"):
    return
  if m not in order:
    order.append(m)
  stack, f = [], frame.f_back  # the rsjax modules below this call, nearest first
  while f is not None:
    below = module_of(f)
    if below is not None and not below.startswith("rsjax.models") and (
        not stack or stack[-1] != below):
      stack.append(below)
    f = f.f_back
  if stack and stack[0] != m and m in stack[1:]:
    climbs.append(" -> ".join([*reversed(stack[:stack.index(m) + 1]), m]))


sys.setprofile(profile)
certify.run(args)
sys.setprofile(None)
print("TRACE " + json.dumps({"modules": order, "climbs": sorted(set(climbs))}))
"""


def _trace(*argv):
  out = subprocess.run(
    [sys.executable, "-c", TRACE, *map(str, argv)], capture_output=True, text=True, timeout=1800
  )
  assert out.returncode == 0, out.stderr
  line = next(x for x in out.stdout.splitlines() if x.startswith("TRACE "))
  return json.loads(line[len("TRACE ") :])


def test_one_image_opens_few_modules_and_never_climbs_back(trained, tmp_path):
  got = _trace(
    "certify",
    trained,
    tmp_path / "one.tsv",
    "--N0",
    "20",
    "--N",
    "100",
    "--max",
    "1",
    "--batch",
    "100",
    "--quiet",
  )
  modules = got["modules"]
  assert modules[0] == "rsjax.data._dataset" and "rsjax.engine.step" in modules
  assert len(modules) <= MAX_MODULES, f"{len(modules)} modules: {modules}"
  assert not got["climbs"], got["climbs"]
  # The path stays out of the launch, training and command-line layers.
  assert not [
    m for m in modules if m.startswith(("rsjax.app.launch", "rsjax.training", "rsjax.app.cli"))
  ], modules


def test_the_trace_sees_a_climb_back(trained, tmp_path):
  """The probe itself: a bound that calls back into the runner is reported as a climb."""
  script = TRACE.replace(
    "certify.run(args)",
    """
from rsjax import stats
from rsjax.runs import runner
real = stats.clopper_pearson_lower
def clopper_pearson_lower(*a, **k):  # called by Cohen's rule, calls the runner back
  runner.default_inputs_per_call()
  return real(*a, **k)
stats.clopper_pearson_lower = clopper_pearson_lower
certify.run(args)""",
  )
  out = subprocess.run(
    [
      sys.executable,
      "-c",
      script,
      "certify",
      str(trained),
      str(tmp_path / "one.tsv"),
      "--N0",
      "20",
      "--N",
      "100",
      "--max",
      "1",
      "--batch",
      "100",
      "--quiet",
    ],
    capture_output=True,
    text=True,
    timeout=1800,
  )
  assert out.returncode == 0, out.stderr
  got = json.loads(next(x for x in out.stdout.splitlines() if x.startswith("TRACE "))[6:])
  assert any(c.endswith("rsjax.engine.cohen_rule -> rsjax.runs.runner") for c in got["climbs"]), got
