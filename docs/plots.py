"""Tables and figures of the site, drawn during the build from committed JSON or from a run.

The executed blocks of the pages (markdown-exec, ``html="true"``) print what these return:
HTML tables and inline SVG figures, so every number and plot on a page comes from the
file or the run named beside it. An ``html="true"`` block's output is inserted as it is, so a
table written in Markdown is converted here (:func:`html`), not left for the page.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load(name: str) -> Any:
  """The JSON at ``name``, a path relative to the checkout (``results/ucan_quick.json``)."""
  return json.loads((ROOT / name).read_text(encoding="utf-8"))


def svg(fig: Any) -> str:
  """``fig`` (matplotlib) as inline SVG, closed after."""
  import matplotlib.pyplot as plt

  buffer = io.StringIO()
  fig.savefig(buffer, format="svg", bbox_inches="tight")
  plt.close(fig)
  text = buffer.getvalue()
  return text[text.index("<svg") :]


def html(markdown_text: str) -> str:
  """``markdown_text`` (tables, emphasis) as HTML, for an ``html="true"`` block."""
  import markdown

  return markdown.markdown(markdown_text, extensions=["tables"])


def _radii(rows: dict[str, dict[str, Any]]) -> list[str]:
  first = next(iter(rows.values()))
  return sorted(first["certified_accuracy"], key=float)


def methods_table(name: str, key: str = "methods", extra: tuple[str, ...] = ()) -> str:
  """An HTML table of ``name``'s ``methods``: certified accuracy at each radius, ACR and
  the fields ``extra`` (each method a row, as the experiment wrote it)."""
  return html(_rows_table(load(name)[key], extra))


def _rows_table(rows: dict[str, dict[str, Any]], extra: tuple[str, ...] = ()) -> str:
  """A Markdown table of ``rows`` (method -> its summary): certified accuracy at each radius,
  ACR and the fields ``extra``."""
  radii = _radii(rows)
  head = ["method", *(f"r={r}" for r in radii), "ACR", *extra]
  out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for method, row in rows.items():
    cells = [f"`{method}`", *(f"{row['certified_accuracy'][r]:.3f}" for r in radii)]
    cells.append(f"{row['acr']:.3f}")
    cells += [_cell(row.get(e)) for e in extra]
    out.append("| " + " | ".join(cells) + " |")
  return "\n".join(out) + "\n"


def _cell(value: Any) -> str:
  if isinstance(value, float):
    return f"{value:.3g}"
  return "" if value is None else str(value)


def methods_plot(name: str, key: str = "methods", title: str = "") -> str:
  """Certified accuracy against radius, one line per method of ``name`` (SVG)."""
  import matplotlib.pyplot as plt

  rows = load(name)[key]
  radii = _radii(rows)
  fig, ax = plt.subplots(figsize=(6.4, 3.6))
  for method, row in rows.items():
    ax.plot(
      [float(r) for r in radii],
      [row["certified_accuracy"][r] for r in radii],
      "o-",
      label=method,
      markersize=3,
    )
  ax.set_xlabel("radius")
  ax.set_ylabel("certified accuracy")
  ax.set_title(title or name)
  ax.legend(fontsize=7, ncol=2)
  ax.grid(alpha=0.3)
  return svg(fig)


def curve_from_tsv(paths: dict[str, str], radii: list[float], title: str = "") -> str:
  """Certified accuracy against radius of certify result files (label -> path), as
  ``rsjax.metrics`` computes it from the rows (SVG)."""
  import matplotlib.pyplot as plt

  from rsjax.metrics import certified_accuracy
  from rsjax.records.io import read_certify

  fig, ax = plt.subplots(figsize=(6.4, 3.6))
  for label, path in paths.items():
    rows = read_certify(ROOT / "build" / "docs-work" / path)
    acc = certified_accuracy(rows.correct, rows.radius, radii, predict=rows.predict)
    ax.plot(radii, acc, "o-", label=label, markersize=3)
  ax.set_xlabel("radius")
  ax.set_ylabel("certified accuracy")
  ax.set_title(title)
  ax.legend(fontsize=8)
  ax.grid(alpha=0.3)
  return svg(fig)


def srs_table(name: str) -> str:
  """The SRS experiment's JSON ``name`` (``experiments/srs_deq.py``): per (model, sigma) its
  settings and an HTML table of each method's certified accuracy, ACR, median seconds per
  image and speed-up over standard RS."""
  out = []
  for tag, run in load(name)["runs"].items():
    out.append(
      f"**{tag}** ({run['images_done']} images, N = {run['n']}, m = {run['m']}, alpha = "
      f"{run['alpha']}; SRS cap {run['srs_radius_cap']:.2f}, standard cap "
      f"{run['standard_radius_cap']:.2f})\n"
    )
    out.append(_rows_table(run["results"], ("seconds_per_image", "speedup_vs_standard")))
  return html("\n".join(out))
