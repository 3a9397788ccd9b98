"""Incremental randomized smoothing the paper's way (Ugare et al., ICLR 2024; issue 73).

For each sigma in {1.0, 0.25, 0.5}: the demo's LeNet on ``mnist5k`` (``benchmarks.measure.
demo_model``, 20 epochs) is the parent, certified once (``rsjax certify``, N0 100, N 20,000,
alpha 0.001); its children are the same model run in bfloat16 (``bf16``) and its weight-only
int8 quantization (``int8``). Each child is certified on every ``skip``-th test digit

* incrementally at each ``n_p`` of ``recert_n``: ``rsjax recertify`` with ``--N n_p``, alpha_2
  0.001 and the gamma switch at 0.99 (rows whose parent p_A_lower >= 0.99 from scratch with
  N0 100 + N ``n_p`` at 0.002), each row at total alpha 0.002;
* from scratch at each ``n_p`` of ``scratch_n`` (the paper's baseline: the same N0, the same
  ``n_p``, the same total alpha 0.002).

Every run is checked by ``rsjax verify``. For each child and sigma the JSON holds, per
configuration, ACR, certified accuracy, seconds an image (the rows' own times: the
certification less JAX's compiling, as the command reports them) and forward passes an image; and the paper's measure, the
time ratio at equal ACR: the time from scratch needs (interpolated linearly between its
``n_p``) to reach the incremental run's ACR, over the incremental run's time; where from
scratch never reaches it on the grid, the ratio is a lower bound (``at_least``).

Commands::

  nice -n 10 python experiments/recertify_mnist.py --quick   # results/recertify_quick.json, .png

Numbers produced (``--quick``, seed 0, 2026-12-07, about 22 minutes on the shared 2-core CPU;
the full table is in ``docs/guides/recertify.md``, the runs in ``results/recertify_quick/``):
the switch takes every digit at sigma 0.25, 75% at 0.5 and 15% at 1.0. At sigma 1.0 the int8
child recertified at n_p 1,000 has ACR 1.392 against 1.320 from scratch at the same n_p, and
is 1.12x faster at equal ACR (1.40x in forward passes; 2.58x projected with the paper's
replay of stored parent predictions, not implemented); the bf16 child is slower than from
scratch at equal ACR (0.62x to 0.75x). Not run: the CIFAR-shaped ResNet-20 children (no CPU
time left for them in this issue).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments import _common  # noqa: E402

RESULTS = _common.RESULTS

N0 = 100
RADII = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


@dataclasses.dataclass(frozen=True)
class Config:
  """The experiment's settings (see the module docstring)."""

  sigmas: tuple
  children: tuple
  skip: int
  stop: int
  parent_n: int
  recert_n: tuple
  scratch_n: tuple
  alpha: float
  gamma: float
  batch: int
  out: str
  results: str


def get_config(quick: bool = True) -> Config:
  """The settings of one run.

  Commands::

    nice -n 10 python experiments/recertify_mnist.py --quick   # get_config(True): 20 digits
    nice -n 10 python experiments/recertify_mnist.py           # get_config(False): 50 digits

  ``--quick`` certifies every 50th of the first 1,000 test digits; otherwise every 20th.
  """
  return Config(
    sigmas=(1.0, 0.25, 0.5),
    children=("int8", "bf16"),
    skip=50 if quick else 20,
    stop=1000,
    parent_n=20_000,
    recert_n=(1000, 4000),
    scratch_n=(1000, 2000, 4000, 10_000),
    alpha=0.001,
    gamma=0.99,
    batch=5000,
    out=os.path.join("build", "recertify_quick" if quick else "recertify_full"),
    results=os.path.join(RESULTS, "recertify_quick" if quick else "recertify_full"),
  )


def _cli(*argv: object) -> str:
  """Runs ``rsjax ARGV`` in this process; returns what it printed."""
  import contextlib
  import io

  from rsjax.app import cli

  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    code = cli.main([str(a) for a in argv])
  if code != 0:
    raise SystemExit(f"failed: rsjax {' '.join(map(str, argv))}")
  return buf.getvalue()


_SECONDS = re.compile(r"(\d+) new inputs in ([\d.]+)s \(([\d.]+)s of it compiling")


def _timed(path: str, *argv: object) -> None:
  """``rsjax ARGV`` writing ``path``; keeps its seconds an image, compiling excluded, in
  ``path.seconds.json`` (a finished run is not run again)."""
  side = path + ".seconds.json"
  if os.path.isfile(side):
    return
  m = _SECONDS.search(_cli(*argv))
  if m is None or int(m.group(1)) == 0:
    raise SystemExit(f"{path}: no timing in the command's output (a resumed run?)")
  written, seconds, compiling = int(m.group(1)), float(m.group(2)), float(m.group(3))
  with open(side, "w") as f:
    json.dump({"seconds_per_image": (seconds - compiling) / written, "rows": written,
               "seconds": seconds, "compile_seconds": compiling}, f)  # fmt: skip


def _child(cfg: Config, sigma: float, name: str) -> tuple[str, tuple]:
  """``(model directory, extra flags)`` of a child of the sigma's parent."""
  from benchmarks.measure import demo_model
  from rsjax import models

  parent = demo_model(sigma).directory
  if name == "bf16":
    return parent, ("--precision", "bfloat16")
  d = os.path.join(cfg.out, f"lenet_{sigma:g}_int8")
  if not os.path.isfile(os.path.join(d, "config.json")):
    model, config = models.load_model(parent)
    models.save_child(d, models.quantize_int8(model), config, {"transform": "int8"})
  return d, ()


def _runs(cfg: Config, sigma: float) -> dict:
  """Certifies the sigma's parent and each child's configurations (a finished run is kept)."""
  from benchmarks.measure import demo_model

  root = os.path.join(cfg.out, f"s{sigma:g}")
  os.makedirs(root, exist_ok=True)
  rows = ("--dataset", "mnist5k", "--sigma", sigma, "--skip", cfg.skip, "--max", cfg.stop,
          "--N0", N0, "--batch", cfg.batch, "--quiet")  # fmt: skip
  parent = os.path.join(root, "parent.tsv")
  _timed(parent, "certify", demo_model(sigma).directory, parent, *rows, "--N", cfg.parent_n,
         "--alpha", cfg.alpha)  # fmt: skip
  out: dict = {"parent": parent}
  for name in cfg.children:
    d, extra = _child(cfg, sigma, name)
    for n in cfg.recert_n:
      p = os.path.join(root, f"{name}_re{n}.tsv")
      _timed(p, "recertify", parent, d, p, "--N", n, "--N0", N0, "--alpha", cfg.alpha,
             "--gamma", cfg.gamma, "--batch", cfg.batch, "--quiet", *extra)  # fmt: skip
      out[(name, "recertify", n)] = p
    for n in cfg.scratch_n:
      p = os.path.join(root, f"{name}_scratch{n}.tsv")
      _timed(p, "certify", d, p, *rows, "--N", n, "--alpha", 2 * cfg.alpha, *extra)
      out[(name, "scratch", n)] = p
  return out


def _summary(path: str, *, n: int, recertify: bool) -> dict:
  """ACR, certified accuracy, seconds and forward passes an image of a verified run."""
  from rsjax import verify
  from rsjax.records import io

  report = verify.verify(path)
  if not report.ok:
    raise SystemExit(f"{path} does not verify: {report.summary()}")
  r = io.read_certify(path)
  ok = (r.predict == r.label) & (r.predict >= 0)
  radius = np.where(ok, r.radius, 0.0)
  out = {
    "images": len(r.idx),
    "acr": float(radius.mean()),
    "accuracy": _common.certified_curve(ok, r.radius, RADII, predict=r.predict),
    # the command's seconds less its compiling, an image (the rows' own times hold the
    # compiling of their first call)
    "seconds_per_image": json.load(open(path + ".seconds.json"))["seconds_per_image"],
    "verified": True,
  }
  if recertify:
    how = np.asarray(r.extra["fallback"], int)
    switched = how == 2
    out["switched_share"] = float(switched.mean())
    # a switched row: N0 + n child passes; a bound row: n passes of each model
    out["forward_passes_per_image"] = float(np.mean(np.where(switched, N0 + n, 2 * n)))
    # a projection, not a measurement: the paper's replay of the parent's stored predictions
    # (one child pass a disagreement sample), which rsjax does not do
    out["forward_passes_replay_per_image"] = float(np.mean(np.where(switched, N0 + n, n)))
    zeta = np.asarray(r.extra["zeta"], float)[~switched]
    out["zeta_mean"] = float(zeta.mean()) if zeta.size else None  # None: every row switched
  else:
    out["forward_passes_per_image"] = float(N0 + n)
  return out


def ratio_at_equal_acr(acr: float, seconds: float, scratch: list[tuple[float, float]]) -> dict:
  """The seconds from scratch needs to reach ``acr`` (linear between the grid's points, sorted
  by seconds) over ``seconds``; ``at_least`` where no point of the grid reaches it."""
  pts = sorted(scratch, key=lambda p: p[1])  # (acr, seconds)
  if acr <= pts[0][0]:
    return {"ratio": pts[0][1] / seconds, "at_least": False, "at_most": True}
  for (a0, t0), (a1, t1) in zip(pts, pts[1:], strict=False):
    if a0 < acr <= a1:
      t = t0 + (t1 - t0) * (acr - a0) / (a1 - a0)
      return {"ratio": t / seconds, "at_least": False, "at_most": False}
  return {"ratio": pts[-1][1] / seconds, "at_least": True, "at_most": False}


def report(cfg: Config, runs: dict, sigma: float) -> dict:
  """One sigma's figures: every configuration's summary and the time ratios."""
  out: dict = {"parent": _summary(runs["parent"], n=cfg.parent_n, recertify=False)}
  for name in cfg.children:
    scratch = {n: _summary(runs[(name, "scratch", n)], n=n, recertify=False)
               for n in cfg.scratch_n}  # fmt: skip
    rec = {n: _summary(runs[(name, "recertify", n)], n=n, recertify=True) for n in cfg.recert_n}
    pts = [(s["acr"], s["seconds_per_image"]) for s in scratch.values()]
    passes = [(s["acr"], s["forward_passes_per_image"]) for s in scratch.values()]
    for n, r in rec.items():
      r["time_ratio_at_equal_acr"] = ratio_at_equal_acr(r["acr"], r["seconds_per_image"], pts)
      r["pass_ratio_at_equal_acr"] = ratio_at_equal_acr(
        r["acr"], r["forward_passes_per_image"], passes
      )
      r["replay_pass_ratio_at_equal_acr"] = ratio_at_equal_acr(
        r["acr"], r["forward_passes_replay_per_image"], passes
      )
      if n in scratch:  # the same n_p
        s = scratch[n]
        r["same_n_p"] = {
          "acr_gain": r["acr"] - s["acr"],
          "seconds_ratio": s["seconds_per_image"] / r["seconds_per_image"],
        }
    out[name] = {"recertify": {str(k): v for k, v in rec.items()},
                 "scratch": {str(k): v for k, v in scratch.items()}}  # fmt: skip
  return out


def plot(cfg: Config, results: dict, path: str) -> None:
  """ACR against seconds an image, from scratch (line) and incrementally (marks), per sigma."""
  import matplotlib
  import matplotlib.ticker

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, len(cfg.sigmas), figsize=(4.2 * len(cfg.sigmas), 3.4))
  for ax, sigma in zip(np.atleast_1d(axes), cfg.sigmas, strict=True):
    res = results.get(f"sigma={sigma:g}")
    if res is None:
      continue
    for name, color in zip(cfg.children, ("C0", "C1"), strict=False):
      s = res[name]["scratch"]
      ax.plot([v["seconds_per_image"] for v in s.values()], [v["acr"] for v in s.values()],
              "-o", color=color, label=f"{name} from scratch")  # fmt: skip
      r = res[name]["recertify"]
      ax.plot([v["seconds_per_image"] for v in r.values()], [v["acr"] for v in r.values()],
              "*", ms=12, color=color, label=f"{name} recertified")  # fmt: skip
    ax.axhline(res["parent"]["acr"], color="gray", ls=":", label="parent (N 20,000)")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.set_title(f"sigma {sigma:g}")
    ax.set_xlabel("seconds an image (2-core CPU)")
    ax.set_ylabel("ACR")
  np.atleast_1d(axes)[0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def _ratio(r: dict) -> str:
  return ("≥ " if r["at_least"] else "≤ " if r["at_most"] else "") + f"{r['ratio']:.2f}x"


def table(results: dict) -> str:
  """The guide's table: per sigma, child and n_p, ACR recertified / from scratch at the same
  n_p, the switched share, seconds an image of both, and the ratios at equal ACR."""
  lines = [
    "| sigma | child | n_p | ACR recertified / from scratch | switched | s an image "
    "recertified / from scratch | time ratio at equal ACR | forward-pass ratio at equal ACR | "
    "the same with replay (projected) |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for key, res in results.items():
    if not key.startswith("sigma="):
      continue
    for child in (k for k in res if k != "parent"):
      for n, r in res[child]["recertify"].items():
        s = res[child]["scratch"][n]
        lines.append(
          f"| {key[6:]} | {child} | {int(n):,} | {r['acr']:.3f} / {s['acr']:.3f} | "
          f"{r['switched_share']:.2f} | {r['seconds_per_image']:.2f} / "
          f"{s['seconds_per_image']:.2f} | {_ratio(r['time_ratio_at_equal_acr'])} | "
          f"{_ratio(r['pass_ratio_at_equal_acr'])} | "
          f"{_ratio(r['replay_pass_ratio_at_equal_acr'])} |"
        )
  return "\n".join(lines)


def run(cfg: Config) -> dict:
  """Every sigma's runs and report; writes ``results`` ``.json`` and ``.png``."""
  results: dict = {"config": {k: v for k, v in dataclasses.asdict(cfg).items()
                              if k not in ("out", "results")}}  # fmt: skip
  for sigma in cfg.sigmas:
    runs = _runs(cfg, sigma)
    results[f"sigma={sigma:g}"] = report(cfg, runs, sigma)
    with open(cfg.results + ".json", "w") as f:
      json.dump(results, f, indent=1, sort_keys=True)
    print(f"sigma {sigma:g}: done", flush=True)
  plot(cfg, results, cfg.results + ".png")
  print(table(results))
  return results


def main(argv=None) -> dict:
  """The command line: ``--quick``, ``--sigmas``."""
  return run(_common.sigmas_config(__doc__, get_config, argv))


if __name__ == "__main__":
  main()
