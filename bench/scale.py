"""Scale: ingest, open, query, memory, disk and ANN recall of a persisted base at 10k, 100k and 1M chunks (JSON on stdout).

Embedding a million chunks with a real model takes hours on 2 cores, so the chunks here are REAL TEXT (sentences sampled,
seeded by content, from the shared BEIR collections cisi, cacm, pt_faquad and zh_cmrc2018_dev, recombined into documents)
embedded by a fast STAND-IN embedder: signed feature hashing of the words (CRC-32) into 384 dimensions, the real
dimension of all-MiniLM-L6-v2 and multilingual-e5-small, vectorised so that a million chunks take about a minute. Every figure that depends on the encoder excludes it: ingest rates are given
without the encode time, queries are timed after their vector is computed. The ANN recall is measured on these vectors
and, separately, on real all-MiniLM-L6-v2 vectors from the bench embedding cache when it exists.

    python bench/scale.py                      # 10k and 100k (about 10 minutes)
    python bench/scale.py --sizes 10000 100000 1000000 --out bench/measured/scale.json

Each size runs in fresh processes (one ingests, one opens and queries), so peak RSS is that of one job.
"""
import argparse, hashlib, json, os, platform, re, resource, shutil, sqlite3, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
COLLECTIONS = ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")
WORK = Path(os.environ.get("LKT_SCALE_DIR", "/tmp/lkt_scale"))
CHUNK_WORDS, CHUNKS_PER_DOC, N_QUERIES = 80, 100, 200
GOALS = {"hybrid_p50_ms": 50, "peak_rss_gb": 6, "open_plus_first_query_s": 10}


def peak_rss_mb() -> float:
    "Peak resident set size of this process (VmHWM), in MB."
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"): return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sentence_pool() -> tuple:
    "Sentences of the shared collections (corpus order) and a content seed."
    sents = []
    for c in COLLECTIONS:
        with open(SHARED / c / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                text = " ".join(x for x in (d.get("title"), d.get("text")) if x)
                sents += [s.strip() for s in re.split(r"(?<=[.!?。！？])\s+|(?<=[。！？])", text) if len(s.strip()) > 20]
    seed = int(hashlib.sha256("\n".join(sents).encode()).hexdigest()[:16], 16)
    return sents, seed


def make_corpus(n_chunks: int, folder: Path) -> dict:
    "Write n_chunks / CHUNKS_PER_DOC text files of real sentences (content-seeded), each about CHUNKS_PER_DOC chunks long."
    import numpy as np
    sents, seed = sentence_pool()
    rng = np.random.default_rng(seed)
    held = set(rng.choice(len(sents), size=len(sents) // 20, replace=False).tolist())   # held out: the queries' source
    pool = [s for i, s in enumerate(sents) if i not in held]
    from local_knowledge_trainer.text import count_words   # the chunker's own word count (a CJK character is a word)
    words = np.array([max(1, count_words(s)) for s in pool])
    n_docs = max(1, n_chunks // CHUNKS_PER_DOC)
    target = CHUNK_WORDS * CHUNKS_PER_DOC
    folder.mkdir(parents=True, exist_ok=True)
    per = int(target / words.mean()) + 1
    for d in range(n_docs):
        idx = rng.integers(len(pool), size=per)
        (folder / f"d{d:06d}.txt").write_text(f"Document {d}\n\n" + " ".join(pool[i] for i in idx), encoding="utf-8")
    qs = []
    hs = sorted(held)
    for j in rng.choice(len(hs), size=N_QUERIES, replace=False):
        w = sents[hs[j]].split()
        k = int(rng.integers(3, 9)); a = int(rng.integers(0, max(1, len(w) - k)))
        qs.append(" ".join(w[a:a + k]) if len(w) > 1 else sents[hs[j]][:12])
    (folder.parent / f"queries_{n_chunks}.json").write_text(json.dumps(qs, ensure_ascii=False))
    return {"documents": n_docs, "sentences_in_pool": len(pool), "held_out_sentences": len(held), "seed": seed}


class TimedHashing:
    "Signed CRC-32 feature hashing of the words into 384 dimensions, adding up its own encode time (excluded from the rates)."
    def __new__(cls):
        import zlib
        import numpy as np
        from local_knowledge_trainer.embeddings import EmbeddingBackend
        word = re.compile(r"\w+", re.UNICODE)
        class _T(EmbeddingBackend):
            name, dim, seconds = "crc-hashing-384", 384, 0.0
            def encode_passages(self, texts, threads=1):
                t = time.perf_counter()
                try:
                    out = np.zeros((len(texts), self.dim), np.float32)
                    for r, text in enumerate(texts):
                        h = np.fromiter((zlib.crc32(w.encode()) for w in word.findall(text.lower())), np.uint32)
                        if len(h): np.add.at(out[r], (h % self.dim).astype(np.intp), np.where(h & 1 << 31, -1.0, 1.0).astype(np.float32))
                    return out
                finally: type(self).seconds += time.perf_counter() - t
        return _T()


def trainer(persist: Path, backend=None):
    from local_knowledge_trainer import KnowledgeTrainer
    from local_knowledge_trainer.embeddings import Embedder
    from local_knowledge_trainer.writing import ReadOnlyCache
    emb = Embedder(backend or TimedHashing(), threads=1)
    emb.cache = ReadOnlyCache(persist / "cache")   # as a trainer gives its own model: the base's file cache (the writer swaps in a writable one)
    return KnowledgeTrainer(embedding_model=emb, persist_dir=str(persist), chunk_size=CHUNK_WORDS, chunk_overlap=0, language="multi",
                            build_graph=False, tune_fusion=False, warm=False, show_progress=False)


def du(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def job_ingest(n: int) -> dict:
    corpus, persist = WORK / f"corpus_{n}", WORK / f"base_{n}"
    shutil.rmtree(persist, ignore_errors=True)
    t = time.perf_counter(); kt = trainer(persist); backend = kt.embedder.backend
    r = kt.ingest(str(corpus))
    wall = time.perf_counter() - t
    out = {"chunks": r.chunks, "documents": len(r.approved_docs), "errors": len(r.errors), "wall_s": round(wall, 1),
           "encode_s": round(backend.seconds, 1), "chunks_per_s_excluding_encode": round(r.chunks / max(wall - backend.seconds, 1e-9), 1),
           "chunks_per_s_including_encode": round(r.chunks / wall, 1), "vector_store": kt.vectors.kind,
           "vector_active": getattr(kt.vectors, "active", kt.vectors.kind), "peak_rss_mb": round(peak_rss_mb()),
           "disk_mb": {"total": round(du(persist) / 2**20), "evidence.sqlite": round((persist / "evidence.sqlite").stat().st_size / 2**20),
                       "vector_store": round(du(persist / "vector_store") / 2**20), "cache": round(du(persist / "cache") / 2**20)}}
    if n < 1_000_000:   # at 1M the re-parse alone takes longer than the rest of the run (fast re-ingest is issue 16)
        t = time.perf_counter(); r2 = kt.ingest(str(corpus)); out["reingest_unchanged_s"] = round(time.perf_counter() - t, 1)
        out["reingest_unchanged"] = len(r2.unchanged)
    kt.close()
    return out


def job_open(n: int) -> dict:
    import numpy as np
    persist = WORK / f"base_{n}"
    qs = json.loads((WORK / f"queries_{n}.json").read_text())
    t0 = time.perf_counter(); kt = trainer(persist); t_open = time.perf_counter() - t0
    emb = kt.embedder
    emb.encode_query(qs[0])                               # the stand-in's query vector, outside the timing
    t = time.perf_counter(); first = kt.query(qs[0], k=10, return_confidence=False); t_first = time.perf_counter() - t
    out = {"open_s": round(t_open, 2), "first_query_s": round(t_first, 3), "open_plus_first_query_s": round(t_open + t_first, 2),
           "vector_active": getattr(kt.vectors, "active", kt.vectors.kind), "chunks": len(kt.store)}
    for q in qs: emb.encode_query(q)                      # every query vector computed once, so timings exclude the encode
    modes = {}
    for mode in ("hybrid", "dense", "sparse", "text"):
        ms = []
        for q in qs:
            t = time.perf_counter(); kt.query(q, k=10, mode=mode, return_confidence=False); ms.append((time.perf_counter() - t) * 1000)
        modes[mode] = {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2)}
    out["query_ms_excluding_encode"] = modes
    # ANN recall@10 against exact search over the same vectors (in blocks); a result counts when its cosine reaches the
    # exact 10th (ties: any tied id is a correct top-10 answer), and also by ids alone
    ids = kt.vectors.ids(); Q = np.stack([emb.encode_query(q) for q in qs]).astype(np.float32)
    Q /= np.maximum(np.linalg.norm(Q, axis=1, keepdims=True), 1e-12)
    best = np.full((len(Q), 10), -np.inf, np.float32); bid = np.zeros((len(Q), 10), np.int64)
    for s in range(0, len(ids), 65536):
        S = Q @ kt.vectors.get_vectors(ids[s:s + 65536]).T
        cs = np.concatenate([best, S], 1); cr = np.concatenate([bid, np.broadcast_to(np.arange(s, s + S.shape[1]), S.shape)], 1)
        top = np.argpartition(-cs, 9, axis=1)[:, :10]; best, bid = np.take_along_axis(cs, top, 1), np.take_along_axis(cr, top, 1)
    got = kt.vectors.search(Q, 10); kth = best.min(axis=1) - 1e-6
    out["recall_at_10_vs_exact"] = round(float(np.mean([sum(sc >= t for _, sc in g) / 10 for t, g in zip(kth, got)])), 4)
    out["recall_at_10_by_ids"] = round(float(np.mean([len({ids[j] for j in e} & {i for i, _ in g}) / 10 for e, g in zip(bid, got)])), 4)
    out["vector_params"] = kt.vectors.params()
    out["peak_rss_mb_before_removal"] = round(peak_rss_mb())
    # deletions at this size: remove 3 documents, one write each (lock, tombstones or rows dropped, BM25, publish), then query again
    srcs = kt.sources()[:3]
    t = time.perf_counter(); removed = sum(kt.remove(s) for s in srcs); t_rm = time.perf_counter() - t
    ms = []
    for q in qs[:100]:
        t = time.perf_counter(); kt.query(q, k=10, return_confidence=False); ms.append((time.perf_counter() - t) * 1000)
    got = kt.vectors.search(Q, 10); gone = set(kt.store.chunk_ids())
    out["removal"] = {"documents": len(srcs), "chunks": removed, "seconds": round(t_rm, 1), "tombstones": getattr(getattr(kt.vectors, "inner", None), "n_tombstones", 0),
                      "hybrid_p50_ms_after": round(float(np.percentile(ms, 50)), 2),
                      "removed_ids_returned": int(sum(i not in gone for g in got for i, _ in g))}
    out["peak_rss_mb"] = round(peak_rss_mb())
    kt.close()
    return out


def real_recall() -> dict:
    "Recall@10 of the default FaissHNSWStore against exact search on real all-MiniLM-L6-v2 vectors (bench embedding cache), before and after 10% deletions."
    import numpy as np
    from local_knowledge_trainer.vector_store import FaissHNSWStore, NumpyStore
    db = Path(os.environ.get("LKT_CACHE_DIR", Path.home() / ".cache" / "lkt")) / "beir" / "embeddings.sqlite"
    if not db.exists(): return {"skipped": f"{db} not found (run bench/quality.py first)"}
    from local_knowledge_trainer.embeddings import EmbeddingCache
    from local_knowledge_trainer.store_schema import read_connection
    cache = EmbeddingCache(); cache.conn, _ = read_connection(db)   # either layout of the cache, read only
    V = np.unique(cache.model_vectors("all-MiniLM-L6-v2", 384), axis=0)
    rng = np.random.default_rng(int(hashlib.sha256(V[:100].tobytes()).hexdigest()[:16], 16))
    perm = rng.permutation(len(V)); Q, X = V[perm[:1000]], V[perm[1000:]]
    ids = [f"c{i}" for i in range(len(X))]
    t = time.perf_counter(); h = FaissHNSWStore(384); h.add(ids, X); build = time.perf_counter() - t
    def recall(store_ids, Xs):
        ex = np.argsort(-(Q @ Xs.T), axis=1)[:, :10]
        got = h.search(Q, 10)
        return float(np.mean([len({store_ids[j] for j in e} & {i for i, _ in g}) / 10 for e, g in zip(ex, got)]))
    r0 = recall(ids, X)
    t = time.perf_counter(); h.search(Q, 10); ms = (time.perf_counter() - t) * 1000 / len(Q)
    drop = set(rng.choice(len(ids), size=len(ids) // 10, replace=False).tolist())
    h.remove([ids[i] for i in drop])
    keep = [i for i in range(len(ids)) if i not in drop]
    r1 = recall([ids[i] for i in keep], X[keep])
    return {"vectors": len(X), "queries": len(Q), "params": h.params(), "build_s": round(build, 1), "recall_at_10": round(r0, 4),
            "search_ms_per_query": round(ms, 3), "after_10pct_deletions": {"recall_at_10": round(r1, 4), "tombstones": h.n_tombstones}}


def exact_vs_hnsw(sizes=(10_000, 100_000, 300_000)) -> list:
    "p50 of one exact search (NumpyStore) against HNSW (FaissHNSWStore) at growing sizes, on clustered unit vectors: the EXACT_MAX choice."
    import numpy as np
    from local_knowledge_trainer.vector_store import FaissHNSWStore, NumpyStore
    rng = np.random.default_rng(15)
    C = rng.normal(size=(300, 384)).astype(np.float32)
    out = []
    for n in sizes:
        X = C[rng.integers(300, size=n)] + 0.6 * rng.normal(size=(n, 384)).astype(np.float32)
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        Q = X[rng.integers(n, size=100)] + 0.3 * rng.normal(size=(100, 384)).astype(np.float32)
        ids = [str(i) for i in range(n)]
        row = {"n": n}
        for name, st in (("exact", NumpyStore(384)), ("hnsw", FaissHNSWStore(384))):
            t = time.perf_counter(); st.add(ids, X); row[f"{name}_build_s"] = round(time.perf_counter() - t, 1)
            ms = []
            for q in Q:
                t = time.perf_counter(); st.search(q, 10); ms.append((time.perf_counter() - t) * 1000)
            row[f"{name}_p50_ms"] = round(float(np.percentile(ms, 50)), 3)
        out.append(row)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--job", choices=["ingest", "open"]); ap.add_argument("--n", type=int)
    ap.add_argument("--out"); ap.add_argument("--keep", action="store_true", help="keep the corpora and bases in $LKT_SCALE_DIR")
    ap.add_argument("--no-extras", action="store_true", help="skip the exact-vs-HNSW and real-embedding recall sections")
    a = ap.parse_args()
    if a.job:
        print(json.dumps(job_ingest(a.n) if a.job == "ingest" else job_open(a.n))); return
    if not SHARED.exists():
        print(json.dumps({"skipped": f"{SHARED} not found: the scale bench samples its text from the shared collections"})); return
    import faiss, numpy as np, local_knowledge_trainer
    from local_knowledge_trainer.vector_store import EXACT_MAX
    res = {"bench": "scale", "stand_in_embedder": "signed CRC-32 feature hashing of the words into 384 dimensions (the real "
                                                    "dimension); text is real, sampled from " + ", ".join(COLLECTIONS),
           "chunking": {"chunk_size_words": CHUNK_WORDS, "overlap": 0, "chunks_per_document": CHUNKS_PER_DOC},
           "settings": {"build_graph": False, "tune_fusion": False, "warm": False, "vector_store": "auto", "EXACT_MAX": EXACT_MAX},
           "goals": GOALS, "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "faiss": faiss.__version__,
                                       "numpy": np.__version__, "lkt": local_knowledge_trainer.__version__}, "sizes": {}}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "LKT_THREADS": "1"}
    for n in a.sizes:
        t = time.perf_counter(); info = make_corpus(n, WORK / f"corpus_{n}"); info["generate_s"] = round(time.perf_counter() - t, 1)
        row = {"corpus": info}
        for job in ("ingest", "open"):
            p = subprocess.run([sys.executable, __file__, "--job", job, "--n", str(n)], env=env, capture_output=True, text=True)
            if p.returncode: row[job] = {"error": p.stderr[-2000:]}; break
            row[job] = json.loads(p.stdout.strip().splitlines()[-1])
        o, i = row.get("open", {}), row.get("ingest", {})
        if "query_ms_excluding_encode" in o:
            row["goals_met"] = {"hybrid_p50_ms": o["query_ms_excluding_encode"]["hybrid"]["p50_ms"] <= GOALS["hybrid_p50_ms"],
                                "peak_rss_gb": max(i.get("peak_rss_mb", 0), o.get("peak_rss_mb", 0)) / 1024 <= GOALS["peak_rss_gb"],
                                "open_plus_first_query_s": o["open_plus_first_query_s"] <= GOALS["open_plus_first_query_s"]}
        res["sizes"][str(n)] = row
        if not a.keep: shutil.rmtree(WORK / f"corpus_{n}", ignore_errors=True); shutil.rmtree(WORK / f"base_{n}", ignore_errors=True)
        print(json.dumps({n: row}), file=sys.stderr)
    if not a.no_extras: res["exact_vs_hnsw"], res["real_embeddings_recall"] = exact_vs_hnsw(), real_recall()
    s = json.dumps(res, indent=1)
    if a.out: Path(a.out).write_text(s + "\n")
    print(s)


if __name__ == "__main__":
    main()
