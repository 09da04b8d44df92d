"""`lkt serve` over real HTTP: uvicorn on a free loopback port serving a small base (evals/sample_corpus, hashing test
embedder), the search page and the API docs driven in headless Chromium, and `run_server` as its own process.

The endpoint-by-endpoint tests (validation, tokens, allowed roots, jobs, removals, feedback, redaction, the write rule)
are in nbs/23d_serve.ipynb, on FastAPI's TestClient; here the write rule and the page's "found / not found" control are
checked over a real socket too. Browser tests skip without Chromium, except in CI (CI set), as in tests/test_docs.py.
"""
import io, json, os, signal, socket, subprocess, sys, tempfile, threading, time, urllib.error, urllib.request
from pathlib import Path

import pytest

from chromium import Chromium, need_chromium   # tests/chromium.py

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "evals" / "sample_corpus"
SHOTS = ROOT / "build" / "serve"
OPTS = dict(vector_store="numpy", build_graph=False, tune_fusion=False)
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    "A base of the sample corpus (40 chunks since issue 26 merged a heading-only chunk into its section) embedded with the hashing test double."
    from local_knowledge_trainer.embeddings import HashingEmbedder
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    d = tmp_path_factory.mktemp("serve") / "kb"
    kt = KnowledgeTrainer(embedding_model=HashingEmbedder(64), persist_dir=d, show_progress=False, **OPTS)
    try: kt.ingest(CORPUS)
    finally: kt.close()
    return d


def _serve(app):
    "uvicorn serving `app` on a free 127.0.0.1 port, in a thread: (url, stop)."
    import uvicorn
    sock = socket.socket(); sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    th = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True); th.start()
    t0 = time.time()
    while not srv.started:
        assert th.is_alive() and time.time() - t0 < 60, "uvicorn did not start"
        time.sleep(0.05)
    def stop(): srv.should_exit = True; th.join(30); sock.close()
    return f"http://127.0.0.1:{sock.getsockname()[1]}", stop


@pytest.fixture(scope="module")
def server(base):
    "uvicorn serving create_app(base) (no token: read-only) on a free 127.0.0.1 port, in a thread; yields its URL."
    from local_knowledge_trainer.embeddings import HashingEmbedder
    from local_knowledge_trainer.serve import create_app
    url, stop = _serve(create_app(base, embedding_model=HashingEmbedder(64), **OPTS))
    yield url
    stop()


@pytest.fixture(scope="module")
def writable_server(base, tmp_path_factory):
    "uvicorn serving create_app(copy of base, writes=True): a server that accepts feedback without a token."
    import shutil
    from local_knowledge_trainer.embeddings import HashingEmbedder
    from local_knowledge_trainer.serve import create_app
    d = tmp_path_factory.mktemp("serve-w") / "kb"
    shutil.copytree(base, d)
    url, stop = _serve(create_app(d, writes=True, embedding_model=HashingEmbedder(64), **OPTS))
    yield url, d
    stop()


def _get(url, data=None, headers=None, method=None):
    req = urllib.request.Request(url, data=json.dumps(data).encode() if data is not None else None,
                                 headers={"Content-Type": "application/json", **(headers or {})}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r: return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e: return e.code, dict(e.headers), json.loads(e.read())


def test_endpoints_over_http(server):
    "Over a real socket: health, a search with the CLI's fields, an error as {error, fix}, and the security headers."
    status, headers, h = _get(f"{server}/health")
    assert status == 200 and h["status"] == "ok" and h["chunks"] == 40, h
    assert "default-src 'self'" in headers["content-security-policy"] and headers["x-content-type-options"] == "nosniff"
    status, headers, r = _get(f"{server}/search", {"question": "fotossíntese: a luz e a clorofila", "k": 3})
    assert status == 200, r
    assert [x["rank"] for x in r["results"]] == [1, 2, 3] and r["results"][0]["source"].endswith("fotossintese_pt.txt"), r
    assert headers["x-lkt-generation"] == str(h["generation"])
    status, _, e = _get(f"{server}/search", {"question": "x", "k": 0})
    assert status == 422 and e["error"].startswith("k: ") and "1 to 100" in e["fix"], e
    status, _, r = _get(f"{server}/search", {"question": "solar panels payback", "k": 5, "where": {"source": "*.pdf", "page": [3, 3]}})
    assert status == 200 and r["results"] and all(x["source"].endswith("reports/solar_report.pdf") and x["page"] == 3 for x in r["results"]), r
    status, _, e = _get(f"{server}/search", {"question": "x", "where": {"sorce": "*.pdf"}})
    assert status == 422 and "unknown key 'sorce'" in e["error"], e


def test_read_only_without_token_over_http(server, base):
    "No token, no writes=True: every route of the OpenAPI schema that is not a read is a 403 over a real socket, and nothing changed."
    import re
    status, _, schema = _get(f"{server}/openapi.json")
    assert status == 200
    reads = {"/search", "/answer"}
    routes = [(m.upper(), re.sub(r"\{[^}]+\}", "x", p)) for p, ops in schema["paths"].items() for m in ops if m not in ("get", "head")]
    assert {("POST", "/ingest"), ("DELETE", "/sources/x"), ("POST", "/feedback")} <= set(routes), routes
    for m, p in routes:
        if p in reads: continue
        status, _, e = _get(f"{server}{p}", {"question": "x", "found": True, "path": "."}, method=m)
        assert status == 403 and "read-only" in e["error"] and "--allow-writes" in e["fix"], (m, p, status, e)
    status, _, h = _get(f"{server}/health")
    assert h["read_only"] is True and h["writes"].startswith("disabled") and h["chunks"] == 40, h
    assert not (base / "feedback.jsonl").exists()


@pytest.fixture(scope="module")
def browser():
    need_chromium()
    b = Chromium()
    yield b
    b.close()


def _not_blank(png: bytes, name: str):
    "Save the screenshot under build/serve/ and check it is a rendered page: ink and many colours."
    import numpy as np
    from PIL import Image
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / f"screenshot-{name}.png").write_bytes(png)
    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    ink, colours = float((a.min(axis=2) < 235).mean()), len(np.unique(a.reshape(-1, 3), axis=0))
    assert ink > 0.03, f"{name}: screenshot nearly blank ({ink:.1%} non-white pixels)"
    assert colours > 64, f"{name}: screenshot has only {colours} colours"


def _requests_elsewhere(browser, server):
    "URLs the page requested from anywhere but this server (data: URLs aside)."
    urls = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    return [u for u in urls if not u.startswith(server + "/") and not u.startswith("data:")]


def test_search_page(browser, server):
    "Type a question, submit: ranked results with their citation (file, quote), confidence, neighbours and trace render."
    browser.goto(f"{server}/", settle=0.5)
    browser.wait_for("document.querySelector('#base-info').textContent.includes('40 chunks')")
    browser.type_text("#question", "fotossíntese: a luz e a clorofila")
    browser.eval("document.querySelector('#trace').click(); document.querySelector('#k').value = '3'")   # 3 results
    browser.eval("document.querySelector('#search-btn').click()")
    n = browser.wait_for("document.querySelectorAll('#results li.result').length")
    assert n == 3, n
    first = browser.eval("(() => { const li = document.querySelector('#results li.result');"
                         " return {source: li.querySelector('.source').textContent, quote: li.querySelector('.quote').textContent,"
                         " rank: li.querySelector('.rank').textContent}; })()")
    assert first["source"].endswith("fotossintese_pt.txt") and first["rank"] == "[1]", first
    assert "fotoss" in first["quote"].lower(), first
    assert browser.eval("document.querySelector('#confidence').hidden") is False
    assert browser.eval("document.querySelector('#confidence').textContent").startswith("Confidence ")
    assert browser.eval("document.querySelector('#trace-box').hidden") is False
    assert '"channels"' in browser.eval("document.querySelector('#trace-json').textContent")
    assert browser.eval("document.querySelector('#feedback').hidden") is True   # a read-only server: no feedback control
    browser.eval("document.querySelector('#results li.result .neighbours button').click()")
    assert browser.wait_for("document.querySelectorAll('#results li.result .neighbour').length") >= 2   # itself and a neighbour
    assert not browser.errors(), "errors in the browser:\n" + "\n".join(browser.errors())
    assert not _requests_elsewhere(browser, server), _requests_elsewhere(browser, server)
    _not_blank(browser.screenshot(full_page=True), "search")
    browser.eval("document.querySelector('#question').value = ''")
    browser.type_text("#question", "x")
    # k=500: the form's own check (max=100) stops a submit, so the Answer button (no form check) sends it to the API
    browser.eval("document.querySelector('#k').value = '500'; document.querySelector('#answer-btn').click()")
    err = browser.wait_for("!document.querySelector('#error').hidden && document.querySelector('#error').textContent")
    assert "k: " in err and "Fix:" in err, err                      # the API's message and fix, shown to the user


def test_feedback_control(browser, writable_server):
    "On a server that accepts writes, each answer has a found / not found control that POSTs /feedback and says it was recorded."
    url, kb = writable_server
    browser.goto(f"{url}/", settle=0.5)
    browser.wait_for("document.querySelector('#base-info').textContent.includes('40 chunks')")
    browser.type_text("#question", "<img src=x onerror=alert(1)> fotossíntese")
    browser.eval("document.querySelector('#search-btn').click()")
    assert browser.wait_for("!document.querySelector('#feedback').hidden") is True
    assert browser.eval("document.querySelectorAll('#results img').length") == 0                     # text, never markup
    browser.eval("document.querySelector('#found-btn').click()")
    status = browser.wait_for("document.querySelector('#feedback-status').textContent.startsWith('recorded') && "
                              "document.querySelector('#feedback-status').textContent")
    assert "1 labelled question" in status, status
    assert browser.eval("document.querySelector('#found-btn').disabled") is True                    # once per answer
    rows = [json.loads(line) for line in (kb / "feedback.jsonl").read_text().splitlines()]
    assert [(r["question"], r["found"], r["k"]) for r in rows] == [("<img src=x onerror=alert(1)> fotossíntese", True, 5)], rows
    assert not browser.errors(), "errors in the browser:\n" + "\n".join(browser.errors())
    _not_blank(browser.screenshot(full_page=True), "feedback")


def test_docs_page(browser, server):
    "The Swagger UI at /docs renders every operation from the shipped assets, with nothing fetched from another host."
    browser.goto(f"{server}/docs", settle=0.5)
    n = browser.wait_for("document.querySelectorAll('.opblock').length >= 9 && document.querySelectorAll('.opblock').length")
    assert n >= 9, n
    assert not browser.errors(), "errors on /docs:\n" + "\n".join(browser.errors())
    assert not _requests_elsewhere(browser, server), _requests_elsewhere(browser, server)


def _free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def test_run_server_process(base):
    "`run_server` in its own process: serves, redacts a secret from uvicorn's access log, and stops cleanly on SIGINT."
    port, secret = _free_port(), "s3rv3r-secret-token-value"
    code = ("from local_knowledge_trainer.serve import run_server\n"
            "from local_knowledge_trainer.embeddings import HashingEmbedder\n"
            f"run_server({str(base)!r}, port={port}, embedding_model=HashingEmbedder(64), vector_store='numpy', "
            "build_graph=False, tune_fusion=False)\n")
    p = subprocess.Popen([sys.executable, "-c", code], cwd=tempfile.gettempdir(), env={**ENV, "LKT_TEST_API_KEY": secret},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        t0 = time.time()
        while True:
            try:
                status, _, h = _get(f"http://127.0.0.1:{port}/health"); break
            except (urllib.error.URLError, ConnectionError):
                assert p.poll() is None and time.time() - t0 < 120, "run_server did not start"
                time.sleep(0.2)
        assert status == 200 and h["chunks"] == 40, h
        status, _, e = _get(f"http://127.0.0.1:{port}/jobs/{secret}")
        assert status == 404 and secret not in json.dumps(e), e
    finally:
        p.send_signal(signal.SIGINT)
        out = p.communicate(timeout=60)[0]
    assert p.returncode == 0, out[-3000:]
    assert f"/jobs/{secret}" not in out and "/jobs/***REDACTED***" in out, out[-3000:]


def test_run_server_refuses_open_address(base):
    "Listening beyond loopback without a token is refused before anything is opened."
    code = f"from local_knowledge_trainer.serve import run_server\nrun_server({str(base)!r}, host='0.0.0.0')\n"
    env = {k: v for k, v in ENV.items() if k != "LKT_TOKEN"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "needs a token" in r.stderr, r.stderr[-2000:]


def test_serve_record_makes_the_cli_warm(base, tmp_path):
    "`run_server` records itself in the base folder once it listens; `lkt search` without --server finds it and asks it; a reload "
    "rewrites the generation; SIGINT removes the record, and the record a killed server leaves is stale (the CLI opens the base itself)."
    import shutil
    from local_knowledge_trainer.embeddings import HashingEmbedder
    from local_knowledge_trainer.layout import SERVE_RECORD, manifest_generation
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    kb = tmp_path / "kb"
    shutil.copytree(base, kb)   # its own base: the record is written into the folder, and an ingest changes it
    code = ("from local_knowledge_trainer.serve import run_server\n"
            "from local_knowledge_trainer.embeddings import HashingEmbedder\n"
            f"run_server({str(kb)!r}, port=0, poll_s=0.1, settle_s=0.1, embedding_model=HashingEmbedder(64), vector_store='numpy', "
            "build_graph=False, tune_fusion=False)\n")
    start = lambda: subprocess.Popen([sys.executable, "-c", code], cwd=tempfile.gettempdir(), env=ENV, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
    lkt = lambda *a: subprocess.run([sys.executable, "-m", "local_knowledge_trainer.cli", *a], cwd=ROOT, env=ENV, capture_output=True,
                                    text=True, timeout=300)
    rec_path = kb / SERVE_RECORD

    def recorded(p, pred=lambda r: True, what="run_server did not record itself"):
        t0 = time.time()
        while True:
            rec = json.loads(rec_path.read_text()) if rec_path.exists() else None
            if rec is not None and pred(rec): return rec
            assert p.poll() is None and time.time() - t0 < 120, what
            time.sleep(0.1)

    p = start()
    try:
        rec = recorded(p)
        g0 = manifest_generation(kb)
        assert {k: rec[k] for k in ("host", "pid", "token_required", "generation")} == \
               {"host": "127.0.0.1", "pid": p.pid, "token_required": False, "generation": g0}, rec
        status, _, h = _get(f"http://127.0.0.1:{rec['port']}/health")             # port=0: the record has the port it got
        assert status == 200 and h["generation"] == g0, h
        r = lkt("search", "fotossíntese: a luz e a clorofila", "--persist", str(kb), "--json", "--k", "3")
        assert r.returncode == 0 and json.loads(r.stdout)["results"][0]["source"].endswith("fotossintese_pt.txt"), r.stderr[-2000:]
        r = lkt("search", "fotossíntese", "--persist", str(kb), "--no-server")   # in-process, the base's test model is not loadable
        assert r.returncode == 1 and "'hashing-64'" in r.stderr, r.stderr[-2000:]
        notes = tmp_path / "notes"; notes.mkdir(); (notes / "okapi.md").write_text("# Okapi\n\nThe okapi is a giraffid of the Congo.\n")
        with KnowledgeTrainer(embedding_model=HashingEmbedder(64), persist_dir=kb, show_progress=False, vector_store="numpy",
                              build_graph=False, tune_fusion=False) as kt:
            kt.ingest(notes)                                                      # another process publishes: the server reloads
        rec = recorded(p, lambda r: r["generation"] == manifest_generation(kb), "the record's generation did not follow the reload")
        assert rec["generation"] == g0 + 1, rec
        r = lkt("search", "okapi giraffid", "--persist", str(kb), "--json", "--k", "1", "--mode", "sparse")
        assert r.returncode == 0 and json.loads(r.stdout)["results"][0]["source"].endswith("okapi.md"), r.stderr[-2000:]
    finally:
        p.send_signal(signal.SIGINT)
        out = p.communicate(timeout=60)[0]
    assert p.returncode == 0 and not rec_path.exists(), out[-3000:]
    assert out.count('"POST /search') == 2, out[-3000:]                          # both warm searches reached the server
    p = start()
    try: recorded(p)
    finally: p.kill(); p.wait(60)
    assert json.loads(rec_path.read_text())["pid"] == p.pid                      # a killed server leaves its record behind …
    r = lkt("search", "fotossíntese", "--persist", str(kb))
    assert r.returncode == 1 and "'hashing-64'" in r.stderr, r.stderr[-2000:]   # … which is stale: the base is opened here
