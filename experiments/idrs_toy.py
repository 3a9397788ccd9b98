"""IDRS toy experiments: the 2-D thin sector (Fig. 1) and the high-dimensional cone (App. A.5).

Data (``cone_data``): class 0 lies in a cone of half-angle ``theta`` around
``e_1`` (a thin sector in 2-D), class 1 is spherically symmetric outside the
cone. Distances to the vertex are ``scale * sqrt(N) * Exponential(1)``, so the
density peaks at the vertex, where the cone is thinnest (the paper: "the
density is higher near the vertex"). 500 training and 100 test points per class.

Base classifier: the exact (Bayes-optimal) classifier of the toy, the cone
indicator ``angle(x, e_1) < theta`` (the supports are disjoint), so results
show the smoothing alone, with no training noise. The paper trains a small MLP.

Smoothing: constant sigma against the paper's sigma(x) (eq. 1,
``sigma_b exp(r (mean 20-NN distance - m))``, capped at ``5 sigma_b`` as in
App. A.5), with the rates of App. A.5. ``m`` is the mean 20-NN distance of a
held-out draw of the training distribution (so sigma(x) ~ sigma_b on typical
points). Certification: ``rsjax.idrs.certify`` (Cohen's CERTIFY with n0=100,
alpha=0.001, then the Thm 3.2 radius, both sides checked); the constant
baseline uses the same code with ``ConstantSigma`` (Cohen's radius).

* Part A (Fig. 1): 2-D, theta = 0.15 (a thin sector), distance scale 4,
  constant sigma = 0.6 against sigma(x) with r in {0.2, 0.5, 1.0} and sigma_b
  calibrated so that the mean test sigma(x) is 0.6. Plots: data with sigma(x)
  circles, smoothed decision regions near the vertex, certified accuracy.
* Part B (Fig. 10 / Table 5): theta = 0.5, N = 2, 6, 18, 60, 180, 400 with the
  paper's (sigma; sigma_b, r): (0.5; 0.4 and 0.5, 0.2), (0.5; 0.4, 0.1),
  (1.0; 0.8, 0.05), (1.0; 0.8 and 1.0, 0.03), (2.0; 1.9, 0.01), (2.0; 1.95, 0.005).
  The distance scale is 4 * sigma (our choice, so that the geometry relative to
  the noise is the same in every dimension; with a fixed scale the cone class
  is simply lost at N >= 180 for both methods).

Commands::

  python experiments/idrs_toy.py          # quick: n = 10,000 (about 1.5 minutes on 2 cores)
  python experiments/idrs_toy.py --full   # n = 100,000 as in the paper

Output: ``results/idrs_toy[_full].json``, ``idrs_toy_2d[_full].png``,
``idrs_toy_cone[_full].png``.

Numbers produced (quick mode, n = 10,000, seed 0; accuracy = certified accuracy
at radius 0 with abstentions counted wrong; ACR over all 200 test points)::

  Part A, 2-D thin sector (mean test sigma 0.600 in every row):
    constant sigma 0.6             acc 0.765  ACR 0.920  class acc 0.53 / 1.00
    sigma(x) r 0.2 (sigma_b 0.585) acc 0.815  ACR 1.042  class acc 0.63 / 1.00
    sigma(x) r 0.5 (sigma_b 0.541) acc 0.855  ACR 0.824  class acc 0.71 / 1.00
    sigma(x) r 1.0 (sigma_b 0.541) acc 0.895  ACR 0.555  class acc 0.79 / 1.00
  Part B, cone: accuracy / ACR (mean test sigma)
    N=2    const 0.5: 0.865 / 0.892   (0.4, 0.2): 0.915 / 0.876 (0.42)   (0.5, 0.2): 0.910 / 0.997 (0.52)
    N=6    const 0.5: 0.830 / 1.061   (0.4, 0.1): 0.860 / 1.026 (0.43)
    N=18   const 1.0: 0.810 / 2.354   (0.8, 0.05): 0.860 / 2.411 (1.02)
    N=60   const 1.0: 0.745 / 2.281   (0.8, 0.03): 0.865 / 2.260 (0.94)  (1.0, 0.03): 0.830 / 2.597 (1.18)
    N=180  const 2.0: 0.775 / 4.828   (1.9, 0.01): 0.845 / 5.031 (2.37)
    N=400  const 2.0: 0.740 / 4.622   (1.95, 0.005): 0.780 / 5.772 (2.67)

sigma(x) raises the clean accuracy in every dimension (smaller sigma near the
vertex, where the cone is thin, keeps the cone class) and removes the
certified-accuracy waterfall at Cohen's maximal radius (3.2 sigma for n =
10,000), but it certifies less at intermediate radii (e.g. N = 18 between 1.7
and 3.2, N = 400 between 3.8 and 6.4: the IDRS radius is below Cohen's at the
same sigma0, Thm B.6); larger rates trade radius for accuracy (Part A). At N = 180 and 400
the mean sigma(x) exceeds the constant sigma, which accounts for part of the
ACR gain. The paper's Table 5 clean accuracies (its own data and a trained MLP)
are 0.943/0.96/0.943, 0.946/0.963, 0.86/0.886, 0.83/0.85/0.83, 0.713/0.726,
0.623/0.623.
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import RESULTS, parser, save_figure, write_json

from rsjax import idrs, metrics, sample_counts

# Fixed settings of the paper (both modes).
K = 20
ALPHA = 0.001
N0 = 100
RATES_2D = (0.2, 0.5, 1.0)


@dataclasses.dataclass(frozen=True)
class Config:
  n: int = 10_000  # estimation samples per input
  seed: int = 0
  suffix: str = ""  # of the output files


def get_config(quick: bool = True) -> Config:
  """The settings of one run (the numbers they produced are in the module docstring).

  Commands::

    python experiments/idrs_toy.py          # get_config(True): n = 10,000 (~1.5 min, 2 cores)
    python experiments/idrs_toy.py --full   # get_config(False): n = 100,000 as in the paper

  The data, rates and cone settings (``K``, ``ALPHA``, ``N0``, ``RATES_2D``,
  ``CONE``) are the paper's and the same in both modes.
  """
  return Config() if quick else Config(n=100_000, suffix="_full")


def cone_data(rng, n_per_class: int, dim: int, theta: float, scale: float = 2.0):
  """Class 0 inside the cone ``angle(x, e_1) < theta``, class 1 outside; see module doc."""

  def radii(n):
    return scale * np.sqrt(dim) * rng.exponential(1.0, n)

  # Class 0: angle uniform in [0, theta) from e_1, random orthogonal direction.
  phi = rng.uniform(0.0, theta, n_per_class)
  ortho = rng.standard_normal((n_per_class, dim))
  ortho[:, 0] = 0.0
  if dim == 1:
    raise ValueError("dim must be >= 2")
  ortho /= np.linalg.norm(ortho, axis=1, keepdims=True)
  if dim == 2:  # both sides of the axis
    ortho[:, 1] = np.where(rng.random(n_per_class) < 0.5, -1.0, 1.0)
  dirs0 = np.cos(phi)[:, None] * np.eye(dim)[0] + np.sin(phi)[:, None] * ortho
  x0 = dirs0 * radii(n_per_class)[:, None]
  # Class 1: uniform directions outside the cone.
  dirs1 = np.zeros((0, dim))
  while dirs1.shape[0] < n_per_class:
    d = rng.standard_normal((2 * n_per_class, dim))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    dirs1 = np.concatenate([dirs1, d[np.arccos(np.clip(d[:, 0], -1, 1)) >= theta]])
  x1 = dirs1[:n_per_class] * radii(n_per_class)[:, None]
  x = np.concatenate([x0, x1]).astype(np.float32)
  y = np.concatenate([np.zeros(n_per_class, int), np.ones(n_per_class, int)])
  return x, y


def cone_classifier(theta: float):
  """The exact classifier: class 0 iff the angle to e_1 is below theta."""
  cos_t = float(np.cos(theta))

  def apply_fn(params, x):
    del params
    norm = jnp.sqrt(jnp.sum(x * x, axis=1))
    inside = x[:, 0] > cos_t * norm
    return jnp.stack([inside, ~inside], axis=1).astype(jnp.float32)

  return apply_fn


def run_config(key, apply_fn, x, y, design, n, label):
  t0 = time.time()
  cert = idrs.certify(
    key,
    apply_fn,
    None,
    x,
    design=design,
    num_classes=2,
    n0=N0,
    n=n,
    alpha=ALPHA,
    batch_size=min(n, 10_000),
  )
  correct = cert.prediction == y
  radii = metrics.radius_grid(8.0, 0.05)
  res = dict(
    label=label,
    design=repr(design),
    rate=cert.rate,
    accuracy=float(np.mean(correct)),
    abstention=float(np.mean(cert.prediction == -1)),
    acr=metrics.average_certified_radius(correct, cert.radius, predict=cert.prediction),
    class_accuracy=[float(np.mean(correct[y == c])) for c in (0, 1)],
    mean_sigma=float(np.mean(cert.sigma)),
    radii=radii.tolist(),
    certified_accuracy=metrics.certified_accuracy(
      correct, cert.radius, radii, predict=cert.prediction
    ).tolist(),
    seconds=time.time() - t0,
  )
  print(
    f"  {label:32s} acc {res['accuracy']:.3f} ACR {res['acr']:.3f} abstain "
    f"{res['abstention']:.3f} class acc {res['class_accuracy'][0]:.2f}/"
    f"{res['class_accuracy'][1]:.2f} mean sigma {res['mean_sigma']:.3f} "
    f"({res['seconds']:.0f} s)"
  )
  return res, cert


def knn_design(rng, x_train, dim, theta, sigma_b, rate, scale):
  """The paper's design with m = mean 20-NN distance of a held-out draw; cap 5 sigma_b."""
  x_val, _ = cone_data(rng, 250, dim, theta, scale)
  m = float(np.mean(np.asarray(idrs.mean_knn_distance(x_val, x_train, k=K))))
  return idrs.KnnSigma(x_train, sigma_b, rate, k=K, m=m, sigma_max=5 * sigma_b), m


def part_a(key, n, rng):
  print("Part A: 2-D thin sector (theta = 0.15, scale 4)")
  dim, theta, sigma, scale = 2, 0.15, 0.6, 4.0
  x_tr, _ = cone_data(rng, 500, dim, theta, scale)
  x_te, y_te = cone_data(rng, 100, dim, theta, scale)
  x_val, _ = cone_data(rng, 250, dim, theta, scale)
  m = float(np.mean(np.asarray(idrs.mean_knn_distance(x_val, x_tr, k=K))))
  apply_fn = cone_classifier(theta)
  key, k1 = jax.random.split(key)
  const, _ = run_config(
    k1, apply_fn, x_te, y_te, idrs.ConstantSigma(sigma), n, f"constant sigma {sigma}"
  )
  rows = []
  for rate in RATES_2D:
    # Calibrate sigma_b so that the mean test sigma(x) equals the constant sigma (Fig. 1).
    base = idrs.KnnSigma(x_tr, 1.0, rate, k=K, m=m, sigma_max=5.0)
    sigma_b = sigma / float(np.mean(base.evaluate(x_te).sigma))
    design = idrs.KnnSigma(x_tr, sigma_b, rate, k=K, m=m, sigma_max=5 * sigma_b)
    key, k2 = jax.random.split(key)
    res, cert = run_config(
      k2, apply_fn, x_te, y_te, design, n, f"sigma(x) sigma_b {sigma_b:.3f}, r {rate}"
    )
    res.update(sigma_b=sigma_b, rate_design=rate)
    rows.append(res)
    if rate == RATES_2D[0]:
      vis_design, vis_sigma = design, cert.sigma
  # Smoothed decision regions on a grid (top class of 1,000 samples).
  gx, gy = np.meshgrid(np.linspace(-1, 10, 221), np.linspace(-2.5, 2.5, 101))
  grid = np.stack([gx.ravel(), gy.ravel()], 1).astype(np.float32)
  k3, k4 = jax.random.split(key)
  top_c = np.asarray(
    sample_counts(k3, apply_fn, None, grid, sigma=sigma, num_classes=2, num=1000)
  ).argmax(1)
  top_i = np.asarray(
    sample_counts(k4, apply_fn, None, grid, sigma=vis_design(grid), num_classes=2, num=1000)
  ).argmax(1)
  return dict(
    dim=dim, theta=theta, scale=scale, sigma=sigma, m=m, constant=const, input_dependent=rows
  ), dict(
    x_te=x_te,
    y_te=y_te,
    sig_te=vis_sigma,
    gx=gx,
    gy=gy,
    top_c=top_c.reshape(gx.shape),
    top_i=top_i.reshape(gx.shape),
  )


CONE = [  # (N, constant sigma, [(sigma_b, r), ...]) from App. A.5
  (2, 0.5, [(0.4, 0.2), (0.5, 0.2)]),
  (6, 0.5, [(0.4, 0.1)]),
  (18, 1.0, [(0.8, 0.05)]),
  (60, 1.0, [(0.8, 0.03), (1.0, 0.03)]),
  (180, 2.0, [(1.9, 0.01)]),
  (400, 2.0, [(1.95, 0.005)]),
]


def part_b(key, n, rng):
  print("Part B: cone (theta = 0.5)")
  theta = 0.5
  out = []
  for dim, sigma, designs in CONE:
    key, kd = jax.random.split(key)
    scale = 4.0 * sigma  # distances grow with sigma: the same geometry relative to the noise
    x_tr, _ = cone_data(rng, 500, dim, theta, scale)
    x_te, y_te = cone_data(rng, 100, dim, theta, scale)
    apply_fn = cone_classifier(theta)
    print(f" N = {dim}, scale {scale}")
    rows = [
      run_config(kd, apply_fn, x_te, y_te, idrs.ConstantSigma(sigma), n, f"constant sigma {sigma}")[
        0
      ]
    ]
    for sigma_b, rate in designs:
      key, kd = jax.random.split(key)
      design, m = knn_design(rng, x_tr, dim, theta, sigma_b, rate, scale)
      r, _ = run_config(
        kd, apply_fn, x_te, y_te, design, n, f"sigma(x) sigma_b {sigma_b}, r {rate}"
      )
      r["m"] = m
      rows.append(r)
    out.append(dict(dim=dim, theta=theta, scale=scale, results=rows))
  return out


def plots(a, vis, b, suffix, out_dir):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from matplotlib.collections import EllipseCollection

  fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
  ax = axes[0]
  x, y = vis["x_te"], vis["y_te"]
  ax.add_collection(
    EllipseCollection(
      2 * vis["sig_te"],
      2 * vis["sig_te"],
      0.0,
      units="xy",
      offsets=x,
      offset_transform=ax.transData,
      facecolors="none",
      edgecolors="gray",
      linewidths=0.3,
    )
  )
  ax.scatter(x[y == 1, 0], x[y == 1, 1], s=5, c="C0", label="class 1")
  ax.scatter(x[y == 0, 0], x[y == 0, 1], s=5, c="C3", label="class 0 (thin sector)")
  ax.set_xlim(-4, 24)
  ax.set_ylim(-8, 8)
  ax.set_aspect("equal")
  ax.set_title("test data, circles: sigma(x)")
  ax.legend(fontsize=7, loc="lower left")
  ax = axes[1]
  ax.contour(vis["gx"], vis["gy"], vis["top_c"], levels=[0.5], colors="red")
  ax.contour(vis["gx"], vis["gy"], vis["top_i"], levels=[0.5], colors="green")
  ax.scatter(x[y == 0, 0], x[y == 0, 1], s=5, c="C3")
  ax.scatter(x[y == 1, 0], x[y == 1, 1], s=5, c="C0", alpha=0.3)
  ax.plot([], [], "r", label=f"constant sigma {a['sigma']}")
  ax.plot([], [], "g", label=f"sigma(x), r={RATES_2D[0]}")
  ax.set_xlim(-1, 10)
  ax.set_ylim(-2.5, 2.5)
  ax.set_title("smoothed decision boundary near the vertex")
  ax.legend(fontsize=7)
  ax = axes[2]
  ax.plot(
    a["constant"]["radii"], a["constant"]["certified_accuracy"], "r", label=a["constant"]["label"]
  )
  for i, res in enumerate(a["input_dependent"]):
    ax.plot(
      res["radii"],
      res["certified_accuracy"],
      color=("g", "C2", "C9")[i],
      ls=("-", "--", ":")[i],
      label=res["label"],
    )
  ax.set_xlabel("radius")
  ax.set_ylabel("certified accuracy")
  ax.set_title("2-D toy: certified accuracy")
  ax.legend(fontsize=7)
  save_figure(fig, os.path.join(out_dir, f"idrs_toy_2d{suffix}.png"), dpi=120)

  fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
  for ax, block in zip(axes.ravel(), b, strict=False):
    for i, res in enumerate(block["results"]):
      ax.plot(
        res["radii"], res["certified_accuracy"], f"C{i}", ls="-" if i else "--", label=res["label"]
      )
    ax.set_title(f"cone, N = {block['dim']}")
    ax.set_xlabel("radius")
    ax.set_ylabel("certified accuracy")
    ax.legend(fontsize=7)
  save_figure(fig, os.path.join(out_dir, f"idrs_toy_cone{suffix}.png"), dpi=120)


def run(cfg: Config, out_dir: str = RESULTS) -> None:
  n, suffix = cfg.n, cfg.suffix
  os.makedirs(out_dir, exist_ok=True)
  t0 = time.time()
  rng = np.random.default_rng(cfg.seed)
  ka, kb = jax.random.split(jax.random.key(cfg.seed))
  a, vis = part_a(ka, n, rng)
  b = part_b(kb, n, rng)
  plots(a, vis, b, suffix, out_dir)
  write_json(
    out_dir,
    f"idrs_toy{suffix}.json",
    dict(
      n=n,
      n0=N0,
      alpha=ALPHA,
      k=K,
      base_classifier="exact cone indicator",
      part_a=a,
      part_b=b,
      seconds=time.time() - t0,
    ),
  )
  print(f"done in {time.time() - t0:.0f} s")


def main(argv=None):
  ap = parser(__doc__)
  ap.add_argument("--full", action="store_true", help="n = 100,000 (the paper's setting)")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  run(dataclasses.replace(get_config(not args.full), seed=args.seed), args.out)


if __name__ == "__main__":
  main()
