"""The documentation site: `nbs/_docs/build.py` builds `_site/` offline (Sphinx -W), every internal link resolves, and a
headless Chromium renders the home page and a statistics page with no JavaScript console errors.

The build renders the executed notebooks that tests/test_notebooks.py left in build/executed/ (tests/conftest.py runs
that file first), so `make test` executes every notebook exactly once; run alone, the build executes the notebooks
that have no up-to-date executed copy. No timeout: the work is bounded instead (nothing is executed twice). Set
LKT_DOCS_FAST=1 to build with `--fast` (notebooks without a copy run only the cells nbdev itself runs for docs).
Browser tests skip when Chromium is missing, except in CI (CI set), where Chromium is required (`make docs-deps`).
"""
import base64, hashlib, html.parser, io, json, os, re, shutil, subprocess, sys, tempfile, threading, time
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from chromium import CHROMIUM, Chromium, need_chromium as _need_chromium   # tests/chromium.py (shared with test_serve.py)

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_site"
BUILD = ROOT / "nbs" / "_docs" / "build.py"
STATS_PAGE = "hypothesis.html"


def _nb_digest():
    "Hash of every notebook in nbs/ and evals/: the docs build must never write into the sources."
    h = hashlib.sha256()
    for p in sorted(list((ROOT / "nbs").rglob("*.ipynb")) + list((ROOT / "evals").rglob("*.ipynb"))):
        h.update(str(p).encode()); h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="session")
def site(notebook_runs):
    "Build the site once per session (warnings are errors: build.py runs sphinx with -W --keep-going)."
    failed = sorted(rel for rel, ok in notebook_runs.items() if not ok)
    if failed:   # their copies are stale: the build would execute them again only to fail again
        pytest.fail("the docs render the executed notebooks, and these failed in this session (see their "
                    "test_notebook cases): " + ", ".join(failed))
    before = _nb_digest()
    cmd = [sys.executable, str(BUILD)] + (["--fast"] if os.environ.get("LKT_DOCS_FAST") else [])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t = time.time()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"docs build failed ({' '.join(cmd)}):\n{out[-8000:]}"
    assert _nb_digest() == before, "the docs build changed notebooks in nbs/ or evals/"
    m = re.search(r"execution: (\d+) reused, (\d+) to run", out)
    assert m, f"the build did not report its executions:\n{out[-3000:]}"
    print(f"docs build: {time.time() - t:.1f} s ({m.group(1)} executed notebooks reused, {m.group(2)} executed)")
    return {"log": out, "reused": int(m.group(1)), "executed": int(m.group(2)), "runs": dict(notebook_runs)}


def test_each_notebook_executed_once(site, build):
    "After tests/test_notebooks.py ran every notebook in this session, the docs build reuses them all: 0 executions."
    wanted = {p.relative_to(ROOT).as_posix() for p in build.notebooks()}
    if not wanted <= set(site["runs"]):
        pytest.skip("run together with tests/test_notebooks.py (as `make test` does) to check the single execution")
    assert site["executed"] == 0, \
        f"the docs build executed {site['executed']} notebooks again:\n" + \
        "\n".join(l for l in site["log"].splitlines() if "execut" in l)


def test_build_warnings_are_errors(site, build):
    "The build ran Sphinx with -W, produced pages for every notebook, and printed no warning at all."
    assert "-W --keep-going" in site["log"], site["log"][-3000:]
    bad = [l for l in site["log"].splitlines() if re.search(r"\bWARNING\b|\bwarning:", l) and "IPKernelApp" not in l]
    assert not bad, "warnings in the docs build:\n" + "\n".join(bad[:40])
    excluded = os.environ.get("LKT_DOCS_EXCLUDE", "").split()      # build.py honours the same variable
    pages = {build.page_name(nb): nb for nb in build.notebooks()}
    assert len(pages) == len(build.notebooks()), "two notebooks map to the same page name"
    for name, nb in pages.items():
        page = SITE / f"{name}.html"
        if name in excluded: continue
        assert page.exists(), f"no page for {nb.name}: expected {page}"
    for p in ("api.html", "results.html", "search.html", "searchindex.js"): assert (SITE / p).exists(), p


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.refs = [], []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("id", "name") if tag in ("a",) else ("id",):
            if a.get(k): self.ids.append(a[k])
        for k in ("href", "src"):
            if a.get(k) is not None and tag in ("a", "link", "script", "img", "source", "iframe", "video", "audio"):
                self.refs.append((tag, k, a[k], a.get("rel", "")))


def _parse(p):
    lp = _Links(); lp.feed(p.read_text(encoding="utf-8")); return lp


def test_internal_links_resolve(site):
    "Every href/src in every HTML page points at an existing file, and every #anchor exists in its target page."
    pages = sorted(SITE.rglob("*.html"))
    assert len(pages) >= 10
    parsed = {p.resolve(): _parse(p) for p in pages}
    broken, external_assets, n = [], [], 0
    for p, lp in parsed.items():
        for tag, attr, ref, rel in lp.refs:
            u = urlsplit(ref)
            if u.scheme in ("http", "https", "//") or ref.startswith("//"):
                if tag != "a": external_assets.append(f"{p.relative_to(SITE)}: <{tag} {attr}={ref}>")
                continue
            if u.scheme in ("mailto", "data", "javascript", "tel"): continue
            n += 1
            target = p if not u.path else (p.parent / unquote(u.path)).resolve()
            if target.is_dir(): target = target / "index.html"
            if not target.exists():
                broken.append(f"{p.relative_to(SITE)}: {ref} (no file)"); continue
            if u.fragment and target.suffix == ".html":
                tp = parsed.get(target) or _parse(target)
                if unquote(u.fragment) not in tp.ids:
                    broken.append(f"{p.relative_to(SITE)}: {ref} (no anchor #{u.fragment} in {target.name})")
    assert n > 500, f"suspiciously few internal links checked: {n}"
    assert not external_assets, "pages load assets from the network (must be offline):\n" + "\n".join(external_assets[:30])
    assert not broken, f"{len(broken)} broken internal links:\n" + "\n".join(broken[:60])


def test_no_duplicate_ids(site):
    "Anchors are unambiguous: no id appears twice in one page."
    dups = []
    for p in SITE.rglob("*.html"):
        ids = _parse(p).ids
        d = {i for i in ids if ids.count(i) > 1}
        if d: dups.append(f"{p.relative_to(SITE)}: {sorted(d)[:10]}")
    assert not dups, "duplicate ids:\n" + "\n".join(dups)


def test_site_content(site):
    "The site holds what a researcher reads: show_doc entries, the API reference, outputs, hidden cells hidden, results."
    core = (SITE / "core.html").read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", core)
    assert 'id="chunk_id"' in core and "Deterministic 16-hex" in core, "show_doc of chunk_id missing on core.html"
    assert "fastcore.test" not in text and "from nbdev.showdoc import show_doc" not in text, "#| hide cells are shown"
    assert "default_exp" not in text
    assert "def chunk_id(" in text and "def html_table(" in text, "#| export cells must be shown as code"
    assert "show_doc(" not in text, "show_doc inputs must be hidden (only their output is shown)"
    api = (SITE / "api.html").read_text(encoding="utf-8")
    import importlib
    modidx = importlib.import_module("local_knowledge_trainer._modidx").d["syms"]
    for mod in modidx:
        for name in getattr(importlib.import_module(mod), "__all__", []):
            assert f"<code>{name}</code>" in api, f"{mod}.{name} missing from the API reference"
    res = (SITE / "results.html").read_text(encoding="utf-8")
    assert ("bench/RESULTS.md" in res) and ("baseline.json" in res)
    idx = json.loads(re.search(r"Search\.setIndex\((.*)\)\s*$", (SITE / "searchindex.js").read_text(encoding="utf-8"),
                               re.S).group(1))
    assert "bootstrap" in idx["terms"], "the local search index misses the word 'bootstrap'"
    if not os.environ.get("LKT_DOCS_FAST"):
        stats = (SITE / STATS_PAGE).read_text(encoding="utf-8")
        assert re.search(r'<img[^>]+src="_images/[^"]+\.png"', stats), f"no plot on {STATS_PAGE}"
        assert (SITE / "_static" / "lkt-plot.png").exists()


# ------------------------------------------------------------------------------------------------ headless Chromium
@pytest.fixture(scope="session")
def server(site):
    "The site over http://127.0.0.1:<port>/ (loopback only), as a static host would serve it."
    handler = partial(SimpleHTTPRequestHandler, directory=str(SITE))
    handler.log_message = lambda *a, **k: None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=httpd.serve_forever, daemon=True); th.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown(); httpd.server_close()


@pytest.fixture(scope="session")
def browser():
    _need_chromium()
    b = Chromium()
    yield b
    b.close()


def _not_blank(png: bytes, name: str):
    "A rendered page: many non-white pixels and many distinct colours (a blank or error page has neither)."
    import numpy as np
    from PIL import Image
    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    ink = float((a.min(axis=2) < 235).mean())
    colours = len(np.unique(a.reshape(-1, 3), axis=0))
    (ROOT / "build" / "docs").mkdir(parents=True, exist_ok=True)
    (ROOT / "build" / "docs" / f"screenshot-{name}.png").write_bytes(png)
    assert ink > 0.03, f"{name}: screenshot nearly blank ({ink:.1%} non-white pixels)"
    assert colours > 64, f"{name}: screenshot has only {colours} colours"
    return ink, colours


@pytest.mark.parametrize("page", ["index.html", STATS_PAGE])
def test_browser_renders_page(browser, server, page):
    "The page loads over http, renders visible content, shows its images, typesets math, and logs no JS error."
    browser.goto(f"{server}/{page}")
    assert not browser.errors(), f"{page}: errors in the browser:\n" + "\n".join(browser.errors())
    assert browser.eval("document.querySelector('article h1') !== null"), f"{page}: no h1 in the article"
    broken = browser.eval("[...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")
    assert not broken, f"{page}: images that did not load: {broken}"
    assert browser.eval("document.querySelectorAll('.sidebar-tree a').length") >= 10, f"{page}: no navigation sidebar"
    if page == STATS_PAGE:
        assert browser.eval("document.querySelectorAll('mjx-container').length") > 0, "MathJax did not typeset any formula"
        if not os.environ.get("LKT_DOCS_FAST"):
            assert browser.eval("[...document.images].filter(i => i.naturalWidth > 200).length") > 0, "no plot shown"
    _not_blank(browser.screenshot(), page.replace(".html", ""))


def test_browser_file_url_and_search(browser, site):
    "Opened straight from disk (file://) the home page works, and the local search finds a word from the notebooks."
    browser.goto((SITE / "index.html").as_uri())
    assert not browser.errors(), "index.html over file://:\n" + "\n".join(browser.errors())
    browser.goto((SITE / "search.html").as_uri() + "?q=bootstrap", settle=0.5)
    end, hits = time.time() + 60, 0
    while time.time() < end and not hits:
        browser.pump(0.3)
        hits = browser.eval("document.querySelectorAll('#search-results li').length")
    assert hits > 0, "the local search found nothing for 'bootstrap'"
    assert not browser.errors(), "search.html:\n" + "\n".join(browser.errors())
