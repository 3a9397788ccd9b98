"""The built site in a real browser (issue 58): headless Chromium through Playwright.

Run after ``python docs/build.py`` (or ``mkdocs build --strict``) has written ``build/site``;
``docs/build.py`` runs this test after the build and ``.ci/run docs`` runs that. The site is
served over HTTP on a free local port (search runs in a web worker, which ``file://`` pages
cannot start). Each page is loaded, its headings and code blocks must render, the landing page's
search must return the reference of ``rsjax.certify``, and a screenshot of each is saved in
``build/screenshots``. Skipped when the site is not built, Playwright is not installed (the
``docs`` extra) or no Chromium is found (``RSJAX_CHROMIUM``, else the system's).
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "build" / "site"
SHOTS = ROOT / "build" / "screenshots"
# Flags for a sandboxed CI machine: nothing fetched, nothing synced, no GPU.
ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
]


def _chromium() -> str | None:
  for name in (os.environ.get("RSJAX_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
    if name and (path := shutil.which(name)):
      return path
  return None


@pytest.fixture(scope="module")
def page():
  if not (SITE / "index.html").is_file():
    pytest.skip("the site is not built (python docs/build.py)")
  sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[docs]'")
  exe = _chromium()
  if exe is None:
    pytest.skip("no Chromium (apt-get install chromium, or set RSJAX_CHROMIUM)")
  handler = functools.partial(QuietHandler, directory=str(SITE))
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  SHOTS.mkdir(parents=True, exist_ok=True)
  try:
    with sync_api.sync_playwright() as p:
      browser = p.chromium.launch(executable_path=exe, args=ARGS)
      tab = browser.new_page(viewport={"width": 1280, "height": 900})
      tab.set_default_timeout(600_000)  # a hang, not a busy machine (Playwright's 30 s is not)
      tab.base = f"http://127.0.0.1:{server.server_address[1]}/"  # type: ignore[attr-defined]
      yield tab
      browser.close()
  finally:
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
  def log_message(self, format, *args):  # noqa: A002 (the base class's name)
    pass


def _load(page, path: str, shot: str):
  response = page.goto(page.base + path)
  assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
  page.wait_for_load_state("networkidle")
  page.screenshot(path=str(SHOTS / shot), full_page=False)
  return page


def _headings(page) -> list[str]:
  return [
    h.strip().rstrip("¶").strip() for h in page.locator("article h1, article h2").all_inner_texts()
  ]


def test_landing_page_renders_headings_and_code(page):
  _load(page, "", "landing.png")
  heads = _headings(page)
  assert heads[0] == "rsjax" and "What it certifies" in heads and "Why to trust it" in heads
  code = page.locator("article pre code").first.inner_text()
  assert "rsjax.certify(" in code
  assert page.locator("nav").get_by_text("Getting started").count() > 0


def test_tutorial_renders_code_and_its_executed_output(page):
  _load(page, "tutorials/research-code/", "tutorial.png")
  heads = _headings(page)
  assert heads[0] == "Pure functions under jit, vmap and grad"
  assert "Counts under jit and vmap" in heads
  blocks = page.locator("article pre code").all_inner_texts()
  assert any("rsjax.engine.traced.counts" in b for b in blocks)  # the source, highlighted
  assert any(b.strip().startswith("(3, 4, 3)") for b in blocks)  # its output, from the build
  assert page.locator("article .highlight span").count() > 100  # Pygments' token spans


@pytest.mark.parametrize("tutorial", ["srs", "ddrs", "ucan", "idrs", "objectives", "denoised"])
def test_results_tables_render_as_tables(page, tutorial):
  """The tables the build prints from results/ are HTML tables, not Markdown shown as text."""
  _load(page, f"tutorials/{tutorial}/", f"{tutorial}.png")
  assert page.locator("article table").count() > 0
  assert "|---|" not in page.locator("article").inner_text()


def test_api_page_renders_the_reference_of_certify(page):
  _load(page, "reference/api/rsjax/", "api.png")
  heads = [h.strip() for h in page.locator("article h2").all_inner_texts()]
  assert any(h.startswith("rsjax.certify") for h in heads), heads[:30]
  assert any(h.startswith("rsjax.Sampling") for h in heads), heads[:30]
  entry = page.locator("[id='rsjax.cohen._certify.certify']")
  assert entry.count() == 1
  doc = entry.locator("xpath=following-sibling::div[1]").inner_text()
  assert "Args" in doc or "Parameters" in doc or "key" in doc


def _search(page, query: str) -> list[str]:
  """The links of the search results for ``query``, typed into the landing page's box."""
  _load(page, "", "search-before.png")
  box = page.locator("input.md-search__input")
  box.click()
  page.keyboard.type(query, delay=20)  # key events: the search reacts to typing
  page.locator(".md-search-result__item").first.wait_for()
  page.screenshot(path=str(SHOTS / f"search-{query}.png"))
  return [a.get_attribute("href") or "" for a in page.locator(".md-search-result__link").all()]


def test_search_returns_the_certify_reference(page):
  links = _search(page, "certify")
  assert any("#rsjax.cohen._certify.certify" in h for h in links), links[:40]
  first = _search(page, "rsjax.certify")[:2]
  assert any(
    "reference/api/rsjax/" in h and h.endswith("#rsjax.cohen._certify.certify") for h in first
  ), first
