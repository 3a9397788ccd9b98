"""Builds the site with warnings as errors, then tests it in a browser, or serves it.

Usage (from anywhere; the ``docs`` extra installed: ``pip install -e ".[docs]"``)::

  python docs/build.py            # mkdocs build --strict into build/site, then the tests
  python docs/build.py --serve    # build, then serve build/site on http://127.0.0.1:8000
  python docs/build.py --no-test  # build only

The tests are ``tests/test_docs.py`` (every public name has a docstring, every command in a
page parses) and ``tests/test_docs_site.py`` (the built site in headless Chromium; screenshots
in build/screenshots). The executed blocks of the pages run during the build, in
build/docs-work (kept: a second build reuses its models and JAX's compiled programs).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "build" / "site"
TESTS = ["tests/test_docs.py", "tests/test_docs_site.py"]


def main(argv: list[str] | None = None) -> int:
  """Builds, then tests or serves; the exit status of the first step that fails."""
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--serve", action="store_true", help="serve build/site after building")
  p.add_argument("--port", type=int, default=8000, help="port of --serve (default: 8000)")
  p.add_argument("--no-test", action="store_true", help="skip the tests after building")
  args = p.parse_args(argv)
  start = time.perf_counter()
  build = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml")]
  status = subprocess.call(build, cwd=ROOT)
  print(f"docs: mkdocs build --strict: status {status} in {time.perf_counter() - start:.0f} s")
  if status:
    return status
  if not args.no_test and not args.serve:
    test = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
    status = subprocess.call(test, cwd=ROOT)
    print(f"docs: build and tests: status {status} in {time.perf_counter() - start:.0f} s")
  if args.serve and not status:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
    with http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler) as server:
      print(f"docs: serving {SITE} on http://127.0.0.1:{args.port} (Ctrl-C stops)")
      try:
        server.serve_forever()
      except KeyboardInterrupt:
        pass
  return status


if __name__ == "__main__":
  sys.exit(main())
