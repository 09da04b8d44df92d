"""Load test of `lkt serve`: POST /search from concurrent clients on loopback against a ~10k-chunk base, with one ingest
job started midway. Prints ONE JSON object on stdout (progress on stderr) and, with --save, writes bench/measured/serve.json.

  .venv/bin/python bench/serve.py [--requests 5000] [--clients 8] [--k 5] [--real-passages] [--save]

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


def start_server(work: Path, port: int):
    kw = ", ".join(f"{k}={v!r}" for k, v in OPTS.items())
    code = (f"from local_knowledge_trainer.serve import run_server\n"
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--real-passages", action="store_true", help="embed every chunk with the model instead of the stand-in")
    ap.add_argument("--max-docs", type=int, default=None, help="use a seeded sample of the documents (a quick check, not the bench)")
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one, removed afterwards)")
    ap.add_argument("--save", action="store_true", help="also write bench/measured/serve.json")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # run the `finally` blocks: stop the server, remove the work folder
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
        port = free_port()
        proc, start_s, health = start_server(work, port)
        try:
            log(f"server up in {start_s} s; {a.requests} requests from {a.clients} clients")
            rec, errors, inconsistent, traces, ingest, wall = load(f"http://127.0.0.1:{port}", work / "kb" / "evidence.sqlite", queries,
                                                                   a.requests, a.clients, a.k, a.requests // 2, work, extra)
        finally:
            proc.send_signal(signal.SIGINT)
            try: proc.wait(120)
            except subprocess.TimeoutExpired: proc.kill()
        lat = [ms for _, ms, _, _ in rec]
        t_in, t_out = ingest.get("t_start"), ingest.get("t_end", 0)
        inside = lambda t0, ms: bool(t_in) and t0 <= t_out and t0 + ms / 1000 >= t_in   # the request overlapped the ingest job
        during = [ms for t0, ms, _, _ in rec if inside(t0, ms)]
        outside = [ms for t0, ms, _, _ in rec if not inside(t0, ms)]
        done = [t0 + ms / 1000 for t0, ms, _, _ in rec]
        first, last = min(t0 for t0, *_ in rec), max(done)
        # stalls outside the ingest: the longest gap before it and after it (the warm-up seconds of the clients excluded)
        gap_out = max(g for g in (longest_gap(done, first + 5, t_in or last), longest_gap(done, t_out or last, last)) if g is not None)
        gap_in = longest_gap(done, t_in, min(t_out, last)) if t_in else None   # while the clients were still asking
        from local_knowledge_trainer.serve import WRITER_NICE, WRITER_SLICE
        gens = sorted({g for *_, g, _ in rec})
        stage = {s: pct([tr[s] for tr in traces if s in tr], 50) for s in ("dense", "sparse", "fuse", "fetch", "confidence", "query_total")}
        out = {"bench": "serve",
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_before": [round(x, 2) for x in load0],
                           "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
               "embedder": {"query": f"{MODEL} (real, loaded once in the server process; every question unique, encoded per request)",
                            "passages": base["passage_vectors"], "midway_ingest": f"{MODEL} (real: the job embeds its new chunks)"},
               "base": {k: v for k, v in base.items() if k != "passage_vectors"},
               "server": {"startup_s": start_s, "generation_at_start": health["generation"]},
               "load": {"requests": a.requests, "max_docs": a.max_docs, "clients": a.clients, "k": a.k, "mode": "hybrid", "confidence": True,
                        "trace_every": 10, "completed": len(rec)},
               "latency_ms": summary(lat), "latency_during_ingest_ms": summary(during), "latency_outside_ingest_ms": summary(outside),
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
        out["note"] = conditions(out)
        text = json.dumps(out, indent=1)
        print(text)
        if a.save: (ROOT / "bench" / "measured").mkdir(exist_ok=True); (ROOT / "bench" / "measured" / "serve.json").write_text(text + "\n")
    finally:
        if not a.work: shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
