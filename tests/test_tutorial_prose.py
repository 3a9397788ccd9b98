"""Numbers and claims in the tutorials' prose, tied to what their executed blocks print or
checked here against what the blocks run (issue 69, item 3).

Each claim about a result in ``docs/tutorials/*.md`` is one of:

* printed by an executed block of its page, the prose pointing at the printed line instead of
  repeating its number: ``PRINTED`` names the statement each block must keep, and
  ``NOT_REPEATED`` the numbers the prose must not quote again (they would drift);
* checked here: recomputed cheaply from the same inputs as the page's block (the same
  commands' settings, the same library function), or read from the committed JSON the page
  draws (one test per page below);
* quoted from a paper, attributed as such (``tests/test_figures.py``'s ``UNBOUND``).

The checks parse the page's text; the few that call rsjax run in well under a second each.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "tutorials"
_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```\s*$", re.S | re.M)


def _page(name):
  return (DOCS / name).read_text(encoding="utf-8")


def _prose(text):
  """The page without its code blocks, whitespace collapsed (sentences wrap)."""
  return " ".join(_FENCE.sub(" ", text).split())


def _blocks(text, executed=None):
  """``[(info string, source)]`` of the page's fenced blocks; ``executed``: only those with
  (True) or without (False) ``exec="on"``."""
  out = [(m[1], m[2]) for m in _FENCE.finditer(text)]
  if executed is None:
    return out
  return [(info, src) for info, src in out if ('exec="on"' in info) == executed]


def _json(name):
  return json.loads((ROOT / name).read_text(encoding="utf-8"))


def _said(prose, pattern):
  """The groups of the one sentence of ``prose`` matching ``pattern``."""
  hits = re.findall(pattern, prose)
  assert len(hits) == 1, f"{pattern!r}: {len(hits)} matches in the prose"
  return hits[0]


def _flags(source, flag):
  """Every value of ``--flag`` in the commands of ``source``."""
  return re.findall(rf"--{flag} (\S+)", source)


def _commands(source):
  """The command lines of a bash block, continuation lines joined."""
  return source.replace("\\\n", " ").splitlines()


# ---------------------------------------------------------------------------
# Printed by the page's executed blocks: (page, a statement one executed block must hold).

PRINTED = [
  ("budgeted.md", "rsjax analyze runs/fixed.tsv runs/looks.tsv runs/anytime.tsv"),
  ("budgeted.md", "rsjax verify runs/anytime.tsv"),
  ("budgeted.md", 'label=f"{name}: mean {used.mean():.0f}"'),
  ("pytorch-checkpoint.md", 'print(f"radii equal in {int(np.sum(a.radius == b.radius))}'),
  ("pytorch-checkpoint.md", 'print(f"predictions equal in'),
  ("pytorch-checkpoint.md", "within 1e-4: {rel <= 1e-4}"),
  ("pytorch-checkpoint.md", "mean or std of layer 0 in the state dict: {any(k.startswith('0.')"),
  ("ddrs.md", "rsjax verify runs/ddrs.tsv"),
  ("idrs.md", "Where they differ at the paper's three decimals"),
  ("multi-process.md", 'echo "idx label predict radius correct: equal"'),
  ("multi-process.md", "rsjax verify runs/two.tsv"),
  ("research-code.md", "counts equal rsjax.sample_counts':"),
  ("research-code.md", "equal to rsjax.certify's:"),
  ("sound-8bit.md", "certificates contradict each other: {bool(contradicts)}"),
  ("sound-8bit.md", "rsjax verify runs/sound.tsv"),
  ("srs.md", "srs.max_certifiable_radius(10_000, 400, 0.001, 1.0)"),
  ("srs.md", "norm.ppf((0.001 / 2) ** (1 / 10_000))"),
  ("srs.md", "srs.min_check_samples(2.0, 10_000, 0.001, 1.0)"),
  ("ucan.md", "rsjax verify runs/ucan.tsv"),
]

# Numbers an executed block prints that the prose must not repeat: (page, text).
NOT_REPEATED = [
  ("srs.md", "1.98 sigma"),
  ("srs.md", "3.17 sigma"),
  ("srs.md", "m = 420"),
  ("sound-8bit.md", "radius 1.23"),
  ("idrs.md", "0.9615"),
]


@pytest.mark.parametrize("page, statement", PRINTED, ids=lambda v: str(v)[:40])
def test_the_block_prints_what_the_prose_points_at(page, statement):
  sources = [src for _, src in _blocks(_page(page), executed=True)]
  assert any(statement in src for src in sources), f"{page}: no executed block holds {statement!r}"


@pytest.mark.parametrize("page, text", NOT_REPEATED, ids=lambda v: str(v)[:40])
def test_the_prose_does_not_repeat_a_printed_number(page, text):
  assert text not in _prose(_page(page)), f"{page}: the prose quotes {text!r}; point at the block"


TUTORIALS = {
  "budgeted.md",
  "ddrs.md",
  "denoised.md",
  "idrs.md",
  "multi-process.md",
  "objectives.md",
  "pytorch-checkpoint.md",
  "research-code.md",
  "sound-8bit.md",
  "srs.md",
  "ucan.md",
}


def test_every_tutorial_is_covered_and_has_an_executed_block():
  pages = {page.name for page in DOCS.glob("*.md")}
  assert pages == TUTORIALS, (
    f"new or gone tutorials {sorted(pages ^ TUTORIALS)}: tie each result claim of a new page's "
    "prose to a printed line or a test here, then list it in TUTORIALS"
  )
  for page in pages:
    assert _blocks(_page(page), executed=True), page


# ---------------------------------------------------------------------------
# Checked here, page by page.


def _inputs_sentence(prose, name):
  """(count, skip, total) of "the same N inputs (every Kth of the T test digits"."""
  said = _said(prose, r"the same (\d+) inputs \(every (\d+)\w\w of the (\d+) test digits")
  assert said, f"{name}: the sentence naming the inputs of the runs"
  return tuple(map(int, said))


def _check_inputs(name, dataset="digits"):
  from rsjax import data
  from rsjax.records import spec

  text = _page(name)
  count, skip, total = _inputs_sentence(_prose(text), name)
  runs = "\n".join(src for info, src in _blocks(text, executed=True) if info.startswith("bash"))
  certify = [line for line in _commands(runs) if line.startswith("rsjax certify")]
  assert certify and {s for line in certify for s in _flags(line, "skip")} == {str(skip)}
  assert len(data.load(dataset, "test")) == total
  assert len(spec.declared_indices(total, skip=skip, count=-1)) == count
  return runs


def test_budgeted_names_the_inputs_and_the_n_its_commands_certify():
  runs = _check_inputs("budgeted.md")
  prose = _prose(_page("budgeted.md"))
  (n,) = {int(v) for v in _flags(runs, "N")}
  assert int(_said(prose, r"at N = ([\d,]+) while this page").replace(",", "")) == n
  figure = _blocks(_page("budgeted.md"), executed=True)[1][1]
  assert f'ax.axhline({n}, color="gray", ls="--", label="fixed N = {n}")' in figure


def test_budgeted_anytime_split_and_prior_are_the_defaults():
  import rsjax

  prose = _prose(_page("budgeted.md"))
  rule = rsjax.Anytime(grid=(0.25,))
  share, rest = map(
    float, _said(prose, r"at every look .*? at ([\d.]+) alpha, .* at the other ([\d.]+) alpha")
  )
  assert (share, rest) == (rule.mixture_share, round(1 - rule.mixture_share, 10))
  assert f"`mixture_share={rule.mixture_share}`" in prose
  assert f"`agree_weight={rule.agree_weight}`" in prose and rule.agree_weight == 0.5  # "half"


def test_budgeted_benchmark_n_and_anytime_stops_sooner():
  prose = _prose(_page("budgeted.md"))
  bench = _json("benchmarks/results/budgeted.json")
  n = int(_said(prose, r"with fixed N = ([\d,]+) on the same inputs").replace(",", ""))
  assert bench["n"] == n
  # "--budget-rule anytime stops sooner at the same guarantee": in every benchmark run.
  for name, run in bench["runs"].items():
    assert run["anytime"]["mean_samples"] < run["budgeted"]["mean_samples"] < n, name


def test_pytorch_checkpoint_training_and_architecture():
  text = _page("pytorch-checkpoint.md")
  prose = _prose(text)
  first = _blocks(text, executed=True)[0][1]
  digits = int(_said(prose, r"for one epoch on ([\d,]+) digits").replace(",", ""))
  assert f"a[:{digits}]" in first
  assert "for i in range(0, len(x), 32):  # one epoch" in first  # one pass over the digits
  conv1, conv2, fc = map(int, _said(prose, r"MNIST LeNet \(conv (\d+), conv (\d+), fc (\d+)\)"))
  assert f"nn.Conv2d(1, {conv1}, 5), nn.Conv2d({conv1}, {conv2}, 5)" in first
  assert f"nn.Linear(800, {fc}), nn.Linear({fc}, 10)" in first


def test_pytorch_checkpoint_rows_need_not_agree():
  prose = _prose(_page("pytorch-checkpoint.md"))
  assert "so their rows agree" not in prose  # false: the noise differs (the claim digest)
  assert "rows need not agree" in prose and "claim's digest" in prose
  # The agreement is printed by an executed block reading both result files.
  text = _page("pytorch-checkpoint.md")
  block = re.search(r"```python exec=\"on\"[^\n]*\n(.*?)```", text[text.index("need not") :], re.S)
  assert block and 'read_certify("runs/torch.tsv")' in block[1] and "radii equal in" in block[1]


def _tolerance_in(test_file, tol="1e-4"):
  source = (ROOT / test_file).read_text(encoding="utf-8")
  return re.search(rf"<= {re.escape(tol)}\b|atol={re.escape(tol)}\b", source) is not None


def test_the_tolerances_the_tutorials_quote_are_the_tests():
  prose = _prose(_page("pytorch-checkpoint.md"))
  assert "`tests/test_torch_convert.py` checks, for each architecture" in prose
  assert "to 1e-4 (relative, float32)" in prose and _tolerance_in("tests/test_torch_convert.py")
  prose = _prose(_page("denoised.md"))
  for test_file in ("test_denoise_diffusers.py", "test_denoise_openai.py", "test_vit.py"):
    assert f"tests/{test_file}" in prose and _tolerance_in(f"tests/{test_file}"), test_file
  assert "1e-4 of diffusers" in prose and prose.count("(within 1e-4;") == 2
  prose = _prose(_page("sound-8bit.md"))
  assert "against a 40-digit computation" in prose
  assert "mp.mp.dps = 40" in (ROOT / "tests/test_directed_rounding.py").read_text()


def test_ddrs_inputs_and_the_papers_step_arithmetic():
  from scipy.stats import norm

  import rsjax

  _check_inputs("ddrs.md")
  prose = _prose(_page("ddrs.md"))
  k, step, slope, moved = _said(
    prose, r"K x step x \|dR/dsigma\| ~ (\d+) x ([\d.e-]+) x ([\d.]+) = ([\d.]+)"
  )
  hi, lo, half = _said(prose, r"\(Phi\^-1\(([\d.]+)\) - Phi\^-1\(([\d.]+)\)\) / 2 = ([\d.]+)")
  ascent = rsjax.ddrs.SigmaAscent()
  assert (int(k), float(step), (ascent.clip)) == (ascent.steps, ascent.lr, (float(lo), float(hi)))
  assert ascent.num_samples == 1  # "defaults = the paper's: K=100, step 1e-4, 1 draw"
  assert f"{(norm.ppf(float(hi)) - norm.ppf(float(lo))) / 2:.2f}" == half == slope
  assert f"{int(k) * float(step) * float(slope):.2f}" == moved


def test_ddrs_experiment_sound_and_sigma_moves():
  prose = _prose(_page("ddrs.md"))
  assert "`sound` is false for every DDRS row" in prose
  result = _json("results/ddrs_quick.json")
  paper, tuned = result["config"]["paper"], result["config"]["tuned"]
  assert (paper["steps"], paper["lr"], paper["num_samples"]) == (100, 1e-4, 1)
  step, draws = _said(prose, r"A step of ([\d.e-]+) with (\d+) draws does move sigma")
  assert (tuned["lr"], tuned["num_samples"]) == (float(step), int(draws))
  methods = result["methods"]
  for name, row in methods.items():
    assert row["sound"] is name.startswith("fixed"), name
  for sigma in result["config"]["sigmas"]:
    fixed, still = methods[f"fixed_s{sigma}"], methods[f"ddrs-paper_s{sigma}"]
    # The paper's step: sigma stays within 0.02 of sigma0, the radii with it (one input in 50).
    assert abs(still["sigma_mean"] - sigma) <= 0.02
    for r, acc in fixed["certified_accuracy"].items():
      assert abs(still["certified_accuracy"][r] - acc) <= 0.02 + 1e-9, (sigma, r)
    assert methods[f"ddrs-tuned_s{sigma}"]["sigma_mean"] > sigma + 0.1  # the tuned step moves it


def test_denoised_settings_and_the_ddpm_timesteps():
  from rsjax.models.denoise import diffusion

  text = _page("denoised.md")
  prose = _prose(text)
  small, ddpm = (src for info, src in _blocks(text, executed=True) if info.startswith("bash"))
  (denoiser,) = [line for line in _commands(small) if line.startswith("rsjax train-denoiser")]
  assert "trained here for one epoch with the MSE objective" in prose
  assert _flags(denoiser, "objective") == ["mse"] and _flags(denoiser, "epochs") == ["1"]
  a, b = _said(prose, r"a tiny one \(two levels of (\d+) and (\d+) channels\), two epochs")
  (unet,) = [line for line in _commands(ddpm) if line.startswith("rsjax train-denoiser")]
  assert f"--unet-channels {a} {b} " in unet and _flags(unet, "epochs") == ["2"]
  schedule = diffusion.linear_schedule()
  assert len(schedule) == 1000  # "the linear 1000-step schedule"
  t1, s1, t2, s2 = _said(prose, r"t\* = (\d+) at sigma ([\d.]+) and (\d+) at ([\d.]+)")
  for t, sigma in ((t1, s1), (t2, s2)):
    assert diffusion.timestep_for_sigma(schedule, float(sigma)) == int(t)


def test_the_extras_the_tutorials_name_exist():
  import tomllib

  extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
  extras = extras["optional-dependencies"]
  names = lambda extra: {re.split(r"[<>=;\[ ]", r)[0] for r in extras[extra]}  # noqa: E731
  assert '`pip install -e ".[torch]"`' in _prose(_page("pytorch-checkpoint.md"))
  assert "torch" in names("torch")
  prose = _prose(_page("denoised.md"))
  assert '`pip install -e ".[diffusion]"` (torch, diffusers)' in prose
  assert {"torch", "diffusers"} <= names("diffusion")


def test_idrs_table_and_its_curves():
  from rsjax import idrs

  table = _json("results/idrs_table1.json")
  differ = [
    (name, p)
    for name, row in table["table"].items()
    for p, ours, paper in zip(
      table["p_a"], idrs.sigma_ratio_threshold(table["p_a"], row["dim"]), row["paper"], strict=True
    )
    if f"{ours:.3f}" != f"{paper:.3f}"
  ]
  assert differ == [("CIFAR-10", 0.99)]  # what the block prints under the table today
  exponent = int(_said(_prose(_page("idrs.md")), r"the same curves to 2\^(\d+)"))
  assert max(table["ratio_vs_dim"]["dims"]) == 2**exponent


def test_multi_process_and_objectives_settings():
  from rsjax import data

  text = _page("objectives.md")
  prose = _prose(text)
  assert "two epochs each" in prose
  small = _blocks(text, executed=True)[0][1]
  assert _flags(small, "epochs") == ["2", "2"] and set(_flags(small, "N")) == {"500"}
  assert '"digits MLP, 2 epochs, N = 500"' in _blocks(text, executed=True)[1][1]
  total = int(_said(prose, r"on the ([\d,]+) MNIST digits \(LeNet").replace(",", ""))
  assert total == len(data.load("mnist5k", "train")) + len(data.load("mnist5k", "test"))
  assert "the embedded `digits` (8x8 images)" in prose
  assert "the embedded 8x8 `digits`" in _prose(_page("denoised.md"))
  assert data.load("digits", "test").arrays()[0].shape[1:] == (8, 8, 1)


def test_objectives_macer_lbd():
  import rsjax.training

  prose = _prose(_page("objectives.md"))
  lbd = float(_said(prose, r"MACER's own lbd = ([\d.]+) \(`rsjax.training.MACER`'s default\)"))
  assert rsjax.training.MACER().lbd == lbd
  doc = " ".join(rsjax.training.MACER.__doc__.split())
  assert f"with lbd = {lbd:g}" in doc and "training dies" in doc  # the measurement it cites
  macer = _json("results/acr_study_quick.json")["config"]["methods"]["macer"]
  assert "`lbd=0.5` after a `deferred` start trains" in prose
  assert macer["lbd"] == 0.5 and macer["deferred"] > 0


def test_research_code_every_block_ran_and_ten_lines():
  text = _page("research-code.md")
  assert "Every block of this page ran while the site was built" in _prose(text)
  assert not [info for info, _ in _blocks(text, executed=False) if info.startswith("python")]
  ten = text[text.index("## Train and certify in ten lines") :]
  block = _blocks(ten, executed=True)[0][1]
  lines = [s for s in block.splitlines() if s.strip() and not re.match(r"(import|from) ", s)]
  assert len(lines) <= 10


def test_sound_8bit_margins_points_and_table():
  import numpy as np

  from rsjax import claims, data
  from rsjax.noise import lattice

  text = _page("sound-8bit.md")
  prose = _prose(text)
  p_margin, r_margin = _said(prose, r"`p_lower` by a relative ([\d.e-]+), `R` by ([\d.e-]+)")
  assert (claims.P_LOWER_MARGIN, claims.RADIUS_MARGIN) == (float(p_margin), float(r_margin))
  assert f"`decimal` at {lattice._PREC} digits" in prose
  x = np.array([0.0, 204 / 255], np.float32)  # the block's two points
  assert "x = np.array([[0.0], [204 / 255]], np.float32)" in text
  assert f"{x[1] - x[0]:.6f}" == "0.800000"  # "x' = 0.8", both on the 8-bit grid
  assert "sigma 0.5" in prose and "SIG = 0.5" in text
  assert "an inverse error function of a 23-bit uniform" in prose
  assert "(ks << 9)" in text and "2**23" in text  # the block reads 32 - 9 = 23 bits
  digits = data.load("digits", "test").arrays()[0]
  assert "`digits`, whose values are `k/16`" in prose
  assert np.array_equal(digits * 16, np.round(digits * 16))
  results = (ROOT / "benchmarks/RESULTS.md").read_text(encoding="utf-8")
  assert '"Issue 41: sound 8-bit noise"' in prose and "Issue 41 (" in results
  assert re.search(r"^## Issue 41 \([^)]*\): sound 8-bit noise$", results, re.M)


def test_srs_settings_and_experiment():
  text = _page("srs.md")
  prose = _prose(text)
  n, m, alpha = _said(prose, r"paper's N = ([\d,]+), m = (\d+), alpha = ([\d.]+)")
  n = n.replace(",", "_")
  block = _blocks(text, executed=True)[0][1]
  assert f"srs.max_certifiable_radius({n}, {m}, {alpha}, 1.0)" in block
  assert f"m = {m}:" in block and f"(1 / {n})" in block
  quick = _json("results/srs_deq_quick.json")
  steps, srs_a, srs_b = _said(
    prose,
    r"standard RS \((\d+) Anderson steps from scratch.*?SRS \((\d+) and (\d+) steps per chunk",
  )
  assert quick["config"]["standard"] == f"{steps}A"
  assert quick["config"]["srs"] == [f"{srs_a}A", f"{srs_b}A"]
  assert quick["complete"]
  images, n_full = _said(prose, r"multiscale DEQ at 0.25, (\d+) images, N = ([\d,]+)")
  pieces = {}
  for piece in ("deq_sigma0.25", "deq_sigma0.5", "mdeq_sigma0.25"):
    full = _json(f"results/srs_deq_full_runs_{piece}.json")
    assert len(full["images"]) == int(images) and full["config"]["n"] == int(
      n_full.replace(",", "")
    )
    assert {"SRS-1B", "SRS-3B"} <= {m for run in full["runs"].values() for m in run["results"]}
    pieces.update(full["runs"])
  assert set(pieces) == {"deq sigma=0.25", "deq sigma=0.5", "mdeq sigma=0.25"}


def test_srs_quick_runs_verify():
  """ "every (model, sigma, method) is one run that `rsjax verify` accepts"."""
  from rsjax import verify

  quick = _json("results/srs_deq_quick.json")
  runs = [row["run"] for run in quick["runs"].values() for row in run["results"].values()]
  assert len(runs) == 3
  for run in runs:
    assert verify.verify(ROOT / run).ok, run


def test_ucan_sound_rows():
  prose = _prose(_page("ucan.md"))
  assert "UCAN rows are sound for the pattern-wise and the frozen dataset-wise noise" in prose
  assert "its results carry `sound=False`" in prose
  result = _json("results/ucan_quick.json")
  unsound = set(result["config"]["unsound_generators"])
  assert unsound == {"input"}
  for name, row in result["methods"].items():
    assert row["sound"] is (name.split("_s")[0] not in unsound), name


def test_the_test_files_the_tutorials_name_exist():
  named = {
    name for page in DOCS.glob("*.md") for name in re.findall(r"tests/\w+\.py", _page(page.name))
  }
  assert len(named) >= 8
  for name in named:
    assert (ROOT / name).is_file(), name
  multihost = (ROOT / "tests/test_multihost.py").read_text(encoding="utf-8")
  assert "SLURM" in multihost and "OMPI" in multihost  # the environments multi-process.md names
