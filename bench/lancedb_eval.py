"""LanceDB (embedded) against today's SQLite + FAISS HNSW pair (and the exact NumpyStore): speed, recall, deletes, disk, RSS
and crash atomicity, on the same vectors and queries in one run; prints ONE JSON object.

Datasets (dimension 384):
  synthetic  a seeded Gaussian mixture: 300 random unit centres, each row a centre plus isotropic noise of sigma 0.06 per
             coordinate (noise norm ~1.18, so neighbours within a cluster are close to random: harder than real text
             embeddings), normalised; queries are fresh draws from the same mixture. A stand-in with cluster structure, NOT real embeddings.
  real       the cached all-MiniLM-L6-v2 vectors in ~/.cache/lkt/beir/embeddings.sqlite (table emb); 1,000 rows held out
             (seeded) as queries, the rest the corpus. Skipped cleanly when the file is missing.
  Chunk text is synthetic in both (~40 words from a 5,000-word seeded vocabulary; the cache holds no text); every source
  has 10 chunks. Base = 100/101 of the corpus, the remaining 1% is the append.

Per dataset each system runs in its own subprocess (so peak RSS, VmHWM, is its own; the input vectors, memory-mapped, are
counted in both):
  faiss   today's pair: EvidenceStore (SQLite + FTS5) for chunks in transactions of 1,000 documents, FAISS HNSW
          (make_vector_store("faiss"), M=32, efConstruction=200, efSearch=128) published by save_store under WriterLock.
  numpy   make_vector_store("numpy") (exact), published by save_store too.
  lance   one LanceDB table (id, text, source, vector) written as one stream; each ANN index in --indexes is built and its
          query settings swept; the cheapest setting with recall@10 >= 0.95 is kept; the append / delete lifecycle runs
          with the index type whose 0.95 setting had the lowest p50.
Measured: rows/s of the initial load and of a 1% append, index build, publish, open + first query in a NEW process (page
cache warm: dropping it needs root), p50/p95 of 200 single queries at k=10, recall@10 against exact brute force (NumPy over
all live rows), the same after deleting 10% of the sources, the cost of getting back to a clean index, disk size, VmHWM.

Kill loops (--kills per loop, at --kill-n synthetic rows): a writer process (it prints "ready" after its imports and
data load) is SIGKILLed at a seeded uniform moment over its measured work time; then a NEW process opens the data, checks it
is readable, that its count and content checksum (sha256 of ids sorted + vectors in id order) equal the old or the new
version, runs a query, and performs a next write (lance: add + delete one row; faiss: WriterLock + save_store).
  lance_append  add 1% rows, then create_index(replace=True)      lance_delete  delete 10% of sources, then optimize()
  faiss_publish load_store, add 1% rows, save_store               faiss_delete  remove 10%, rebuild(), save_store

  .venv/bin/python bench/lancedb_eval.py [--sizes 100000] [--no-real] [--kills 20] [--kill-n 20000]
                                         [--indexes IVF_PQ,IVF_HNSW_SQ] [--out PATH | --no-save] [--work DIR]
Written to bench/measured/lancedb.json unless --no-save (or to --out).
"""
import argparse, hashlib, json, os, platform, random, shutil, signal, sqlite3, subprocess, sys, tempfile, time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RUST_LOG", "error")      # lance's deprecation warnings go to stderr per query otherwise
DIM, K, NQ_LAT, SEED, SIGMA = 384, 10, 200, 0, 0.06
CACHE = Path.home() / ".cache" / "lkt" / "beir" / "embeddings.sqlite"
PY = sys.executable


def log(*a): print(*a, file=sys.stderr, flush=True)
def hwm_mb():
    for l in open("/proc/self/status"):
        if l.startswith("VmHWM:"): return round(int(l.split()[1]) / 1024, 1)
def du_mb(p):
    p = Path(p)
    if p.is_file(): return round(p.stat().st_size / 2**20, 2)
    return round(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2**20, 2)
def pct(ms):
    a = np.asarray(ms); return {"p50_ms": round(float(np.percentile(a, 50)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3)}
def rid(i): return f"c{int(i):08d}"
def sid(i): return f"s{int(i) // 10:07d}"


# --------------------------------------------------------------------------------------------------------------------
# data
def unit(x): return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

def synthetic(n, nq, seed=SEED, centres=300):
    rng = np.random.default_rng(seed)
    C = unit(rng.standard_normal((centres, DIM)))
    def draw(m):
        out = np.empty((m, DIM), np.float32)
        for s in range(0, m, 100_000):
            e = min(m, s + 100_000)
            out[s:e] = unit(C[rng.integers(0, centres, e - s)] + SIGMA * rng.standard_normal((e - s, DIM)).astype(np.float32))
        return out
    return draw(n), draw(nq)

def real(nq=1000, seed=SEED):
    if not CACHE.exists(): return None
    c = sqlite3.connect(f"file:{CACHE}?mode=ro", uri=True)
    rows = c.execute("SELECT chunk_id, vec FROM emb WHERE model='all-MiniLM-L6-v2' AND dim=384 ORDER BY chunk_id").fetchall()
    c.close()
    if len(rows) < 5000: return None
    X = unit(np.stack([np.frombuffer(v, dtype=np.float32) for _, v in rows]))
    perm = np.random.default_rng(seed).permutation(len(X))
    return X[perm[nq:]], X[perm[:nq]]

def texts(n, seed=SEED):
    rng = np.random.default_rng(seed + 1)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(letters[rng.integers(0, 26, rng.integers(3, 10))]) for _ in range(5000)]
    vocab = np.array(vocab, dtype=object)
    idx = rng.integers(0, len(vocab), (n, 40))
    return [" ".join(vocab[r]) for r in idx]

def exact_topk(V, Q, k=K, mask=None):
    "Row indices of the exact top-k by inner product (unit vectors: cosine), optionally over live rows only."
    best_s = np.full((len(Q), k), -np.inf, np.float32); best_i = np.zeros((len(Q), k), np.int64)
    for s in range(0, len(V), 200_000):
        S = Q @ V[s:s + 200_000].T
        if mask is not None: S[:, ~mask[s:s + 200_000]] = -np.inf
        cs = np.concatenate([best_s, S], 1); ci = np.concatenate([best_i, np.arange(s, s + S.shape[1])[None].repeat(len(Q), 0)], 1)
        top = np.argpartition(-cs, k - 1, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cs, top, 1), np.take_along_axis(ci, top, 1)
    return best_i

def prepare(d:Path, V, Q):
    "Write the dataset folder the workers read: vectors, queries, texts, deleted sources and exact truths."
    d.mkdir(parents=True, exist_ok=True)
    n_all = len(V); n_base = int(round(n_all / 1.01)); n_sources = (n_all + 9) // 10
    np.save(d / "V.npy", V); np.save(d / "Q.npy", Q)
    T = texts(n_all)
    (d / "texts.json").write_text(json.dumps(T))
    rng = np.random.default_rng(SEED + 2)
    dead_src = np.sort(rng.choice(n_sources, n_sources // 10, replace=False))
    mask = ~np.isin(np.arange(n_all) // 10, dead_src)
    np.save(d / "dead_sources.npy", dead_src)
    t = time.perf_counter()
    np.save(d / "truth_full.npy", exact_topk(V, Q))
    np.save(d / "truth_deleted.npy", exact_topk(V, Q, mask=mask))
    np.save(d / "truth_base.npy", exact_topk(V[:n_base], Q))
    meta = {"n_all": n_all, "n_base": n_base, "n_append": n_all - n_base, "n_queries": len(Q), "n_sources": n_sources,
            "deleted_sources": len(dead_src), "deleted_rows": int((~mask).sum()), "truth_s": round(time.perf_counter() - t, 2)}
    (d / "meta.json").write_text(json.dumps(meta))
    return meta

def recall(got, truth):
    "Mean |got ∩ truth| / k over queries; got: lists of row indices."
    return round(float(np.mean([len(set(g) & set(t.tolist())) / len(t) for g, t in zip(got, truth)])), 4)


# --------------------------------------------------------------------------------------------------------------------
# workers (one process each)
def _load(d):
    d = Path(d)
    return (d, json.loads((d / "meta.json").read_text()), np.load(d / "V.npy", mmap_mode="r"), np.load(d / "Q.npy"),
            json.loads((d / "texts.json").read_text()))

def _run_queries(fn, Q, truth, nlat=NQ_LAT):
    "Latency of the first nlat single queries, recall over all queries; fn(q) -> row indices."
    ms, got = [], []
    for i, q in enumerate(Q):
        t = time.perf_counter(); r = fn(q); dt = (time.perf_counter() - t) * 1e3
        if i < nlat: ms.append(dt)
        got.append(r)
    return {**pct(ms), f"recall@{K}": recall(got, truth), "queries_latency": min(nlat, len(Q)), "queries_recall": len(Q)}

def _open_child(code:str, args:list, repeats=3)->dict:
    "Run `code` in new processes (it prints a JSON dict); the median of each number over `repeats`."
    outs = []
    for _ in range(repeats):
        r = subprocess.run([PY, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=900)
        if r.returncode: return {"error": r.stderr[-800:]}
        outs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return {k: round(float(np.median([o[k] for o in outs])), 4) for k in outs[0]}

OPEN_FAISS = r'''
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from local_knowledge_trainer.vector_store import load_store
from local_knowledge_trainer.store import EvidenceStore
t1 = time.perf_counter()
s = load_store(sys.argv[1], readonly=True); t2 = time.perf_counter()
q = np.load(sys.argv[3])[0]; s.search(q, 10); t3 = time.perf_counter()
e = EvidenceStore(sys.argv[2], readonly=True); t4 = time.perf_counter()
e.search_text("the", 10) if hasattr(e, "search_text") else None; t5 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_vectors_s": t2 - t1, "first_vector_query_s": t3 - t2, "open_sqlite_s": t4 - t3,
                  "first_fts_query_s": t5 - t4, "open_plus_first_query_s": (t3 - t1) + (t5 - t3)}))
'''

OPEN_LANCE = r'''
import json, sys, time
t0 = time.perf_counter()
import numpy as np, lancedb
t1 = time.perf_counter()
db = lancedb.connect(sys.argv[1]); tbl = db.open_table("chunks"); t2 = time.perf_counter()
q = np.load(sys.argv[2])[0]
x = tbl.search(q).distance_type("cosine").limit(10).select(["id", "_distance"])
nprobes, refine, ef = [None if a == "-" else int(a) for a in sys.argv[3:6]]
if nprobes: x = x.nprobes(nprobes)
if refine: x = x.refine_factor(refine)
if ef: x = x.ef(ef)
x.to_arrow(); t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_table_s": t2 - t1, "first_query_s": t3 - t2, "open_plus_first_query_s": t3 - t1}))
'''

def _add_docs(es, T, lo, hi, batch_docs=1000):
    from local_knowledge_trainer.core import Document, Chunk
    for s0 in range(lo // 10, (hi + 9) // 10, batch_docs):
        with es.transaction():
            for sdoc in range(s0, min(s0 + batch_docs, (hi + 9) // 10)):
                rows = range(max(lo, sdoc * 10), min(hi, sdoc * 10 + 10))
                src = sid(sdoc * 10)
                es.add_document(Document(source=src, format="text", content_hash=src,
                                         chunks=[Chunk(id=rid(i), text=T[i], source=src) for i in rows]))

def worker_vec(d, kind, rebuild=True):
    "Today's pair (kind 'faiss': SQLite + FAISS) or the exact NumpyStore ('numpy', vectors only)."
    from local_knowledge_trainer.vector_store import make_vector_store, save_store
    from local_knowledge_trainer.persist import WriterLock
    d, meta, V, Q, T = _load(d)
    nb, na = meta["n_base"], meta["n_all"]
    base = d / f"base_{kind}"; shutil.rmtree(base, ignore_errors=True); base.mkdir()
    out = {"system": "sqlite+faiss" if kind == "faiss" else "numpy (exact)", "rss_after_imports_mb": hwm_mb()}
    ids = [rid(i) for i in range(na)]
    tr_full, tr_del, tr_base = (np.load(d / f) for f in ("truth_full.npy", "truth_deleted.npy", "truth_base.npy"))
    st = make_vector_store(kind, DIM)
    t = time.perf_counter(); st.add(ids[:nb], np.asarray(V[:nb])); dt = time.perf_counter() - t
    out["load_vectors"] = {"rows": nb, "s": round(dt, 2), "rows_per_s": round(nb / dt)}
    if kind == "faiss":
        from local_knowledge_trainer.store import EvidenceStore
        es = EvidenceStore(str(base / "store.sqlite"))
        t = time.perf_counter(); _add_docs(es, T, 0, nb); dt = time.perf_counter() - t
        out["load_sqlite"] = {"rows": nb, "s": round(dt, 2), "rows_per_s": round(nb / dt)}
    with WriterLock(base):
        t = time.perf_counter(); save_store(st, base, model="bench"); out["publish_s"] = round(time.perf_counter() - t, 2)
    out["load_total_rows_per_s"] = round(nb / (out["load_vectors"]["s"] + out.get("load_sqlite", {}).get("s", 0) + out["publish_s"]))
    row = lambda r: [int(i[1:]) for i, _ in r]
    qfn = lambda q: row(st.search(q, K))
    out["query_base"] = _run_queries(qfn, Q, tr_base)
    if kind == "faiss":
        sweep = {}
        for ef in (16, 32, 64, 128, 256, 512):
            st.ef_search = ef; sweep[ef] = _run_queries(qfn, Q[:NQ_LAT], tr_base[:NQ_LAT])
            if sweep[ef][f"recall@{K}"] >= 0.99: break
        st.ef_search = 128
        out["ef_sweep_base"] = sweep
        ok = [ef for ef, r in sweep.items() if r[f"recall@{K}"] >= 0.95]
        out["min_ef_for_recall_0.95"] = min(ok) if ok else None
    # append 1%
    t = time.perf_counter(); st.add(ids[nb:na], np.asarray(V[nb:na])); dv = time.perf_counter() - t
    ds = 0.0
    if kind == "faiss":
        t = time.perf_counter(); _add_docs(es, T, nb, na); ds = time.perf_counter() - t
    with WriterLock(base):
        t = time.perf_counter(); save_store(st, base, model="bench"); dp = time.perf_counter() - t
    out["append"] = {"rows": na - nb, "vectors_s": round(dv, 3), "sqlite_s": round(ds, 3), "publish_s": round(dp, 2),
                     "rows_per_s_incl_publish": round((na - nb) / (dv + ds + dp)), "rows_per_s_excl_publish": round((na - nb) / (dv + ds))}
    out["query_after_append"] = _run_queries(qfn, Q, tr_full)
    code = OPEN_FAISS if kind == "faiss" else OPEN_FAISS.replace("e = EvidenceStore(sys.argv[2], readonly=True)", "e = None").replace(
        'e.search_text("the", 10) if hasattr(e, "search_text") else None', "None")
    out["open_new_process"] = _open_child(code, [base, base / "store.sqlite", d / "Q.npy"])
    out["disk_mb"] = {"vector_store": du_mb(base / "vector_store")}
    if kind == "faiss":
        es.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        out["disk_mb"]["sqlite"] = du_mb(base / "store.sqlite")
    # delete 10% of the sources
    dead = np.load(d / "dead_sources.npy")
    dead_ids = [rid(i) for s in dead for i in range(s * 10, min(na, s * 10 + 10))]
    t = time.perf_counter(); st.remove(dead_ids); dv = time.perf_counter() - t
    ds = 0.0
    if kind == "faiss":
        t = time.perf_counter()
        with es.transaction():
            for s in dead: es.remove_source(sid(s * 10))
        ds = time.perf_counter() - t
    with WriterLock(base):
        t = time.perf_counter(); save_store(st, base, model="bench"); dp = time.perf_counter() - t
    out["delete"] = {"rows": len(dead_ids), "sources": len(dead), "vectors_s": round(dv, 3), "sqlite_s": round(ds, 3), "publish_s": round(dp, 2),
                     "tombstones": getattr(st, "n_tombstones", 0)}
    out["query_after_delete"] = _run_queries(qfn, Q, tr_del)
    if kind == "faiss" and not rebuild: out["clean_index"] = {"skipped": "--no-rebuild"}
    if kind == "faiss" and rebuild:
        t = time.perf_counter(); st.rebuild(); dr = time.perf_counter() - t
        with WriterLock(base):
            t = time.perf_counter(); save_store(st, base, model="bench"); dp = time.perf_counter() - t
        out["clean_index"] = {"how": "FaissHNSWStore.rebuild() (drops tombstones) + save_store", "rebuild_s": round(dr, 2), "publish_s": round(dp, 2)}
        out["query_after_rebuild"] = _run_queries(qfn, Q, tr_del)
    out["disk_mb_after_delete"] = {"vector_store": du_mb(base / "vector_store")}
    out["peak_rss_mb"] = hwm_mb()
    return out


LANCE_SETTINGS = {   # (nprobes, refine_factor, ef); None = the library default; tried in order until recall@10 >= 0.95
    "IVF_PQ": [(None, None, None), (20, None, None), (20, 5, None), (20, 10, None), (40, 10, None), (40, 20, None), (80, 20, None),
               (80, 50, None), (160, 50, None)],
    "IVF_HNSW_SQ": [(None, None, None), (20, None, 100), (20, 2, 100), (20, 5, 150), (40, 5, 200), (40, 10, 300), (80, 10, 400),
                    (160, 20, 500)],
}

def _lance_query(tbl, setting):
    nprobes, refine, ef = setting
    def fn(q):
        x = tbl.search(q).distance_type("cosine").limit(K).select(["id", "_distance"])
        if nprobes: x = x.nprobes(nprobes)
        if refine: x = x.refine_factor(refine)
        if ef: x = x.ef(ef)
        return [int(i[1:]) for i in x.to_arrow().column("id").to_pylist()]
    return fn

def _lance_index(tbl, kind, n):
    from lancedb.index import IvfPq, HnswSq
    cfg = IvfPq(distance_type="cosine") if kind == "IVF_PQ" else HnswSq(distance_type="cosine")
    t = time.perf_counter(); tbl.create_index("vector", config=cfg, replace=True); return round(time.perf_counter() - t, 2)

def _unindexed(tbl):
    try:
        ix = tbl.list_indices()
        if not ix: return None
        s = tbl.index_stats(ix[0].name); return {"indexed": s.num_indexed_rows, "unindexed": s.num_unindexed_rows}
    except Exception as e: return {"error": str(e)[:200]}

def _arrow(V, T, lo, hi, step=50_000):
    import pyarrow as pa
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("source", pa.string()), ("vector", pa.list_(pa.float32(), DIM))])
    def batches():
        for s in range(lo, hi, step):
            e = min(hi, s + step)
            v = np.ascontiguousarray(V[s:e], dtype=np.float32)
            yield pa.record_batch([pa.array([rid(i) for i in range(s, e)]), pa.array(T[s:e]), pa.array([sid(i) for i in range(s, e)]),
                                   pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM)], schema=schema)
    return pa.RecordBatchReader.from_batches(schema, batches())

def worker_lance(d, indexes):
    import lancedb
    d, meta, V, Q, T = _load(d)
    nb, na = meta["n_base"], meta["n_all"]
    tr_full, tr_del, tr_base = (np.load(d / f) for f in ("truth_full.npy", "truth_deleted.npy", "truth_base.npy"))
    base = d / "base_lance"; shutil.rmtree(base, ignore_errors=True)
    out = {"system": "lancedb", "lancedb": lancedb.__version__, "rss_after_imports_mb": hwm_mb()}
    db = lancedb.connect(str(base))
    t = time.perf_counter(); tbl = db.create_table("chunks", data=_arrow(V, T, 0, nb)); dt = time.perf_counter() - t
    out["load"] = {"rows": nb, "s": round(dt, 2), "rows_per_s": round(nb / dt), "how": "one create_table from a RecordBatchReader (one commit)"}
    out["flat_no_index"] = _run_queries(_lance_query(tbl, (None, None, None)), Q[:NQ_LAT], tr_base[:NQ_LAT])
    out["indexes"], best = {}, None
    for kind in indexes:
        r = {"build_s": _lance_index(tbl, kind, nb), "settings": []}
        for setting in LANCE_SETTINGS[kind]:
            q = _run_queries(_lance_query(tbl, setting), Q[:NQ_LAT], tr_base[:NQ_LAT])
            r["settings"].append({"nprobes": setting[0], "refine_factor": setting[1], "ef": setting[2], **q})
            log(f"  lance {kind} {setting}: {q}")
            if q[f"recall@{K}"] >= 0.95: break
        ok = [s for s in r["settings"] if s[f"recall@{K}"] >= 0.95]
        r["default"] = r["settings"][0]
        r["for_recall_0.95"] = ok[0] if ok else None
        if ok:   # confirm on every held-out query
            s = ok[0]; r["for_recall_0.95_all_queries"] = _run_queries(_lance_query(tbl, (s["nprobes"], s["refine_factor"], s["ef"])), Q, tr_base)
        r["default_all_queries"] = _run_queries(_lance_query(tbl, (None, None, None)), Q, tr_base)
        out["indexes"][kind] = r
        if ok and (best is None or ok[0]["p50_ms"] < out["indexes"][best]["for_recall_0.95"]["p50_ms"]): best = kind
    best = best or indexes[0]
    if best != indexes[-1]: out["lifecycle_index_rebuild_s"] = _lance_index(tbl, best, nb)
    s95 = out["indexes"][best]["for_recall_0.95"]
    setting = (s95["nprobes"], s95["refine_factor"], s95["ef"]) if s95 else (None, None, None)
    out["lifecycle"] = {"index": best, "setting": {"nprobes": setting[0], "refine_factor": setting[1], "ef": setting[2]}}
    qfn = _lance_query(tbl, setting)
    out["disk_mb_base"] = du_mb(base)
    # append 1%
    t = time.perf_counter(); tbl.add(_arrow(V, T, nb, na)); da = time.perf_counter() - t
    out["append"] = {"rows": na - nb, "s": round(da, 3), "rows_per_s": round((na - nb) / da), "index_rows": _unindexed(tbl)}
    out["query_after_append_unindexed"] = _run_queries(qfn, Q, tr_full)
    t = time.perf_counter(); tbl.optimize(); out["append"]["optimize_s"] = round(time.perf_counter() - t, 2)
    out["append"]["index_rows_after_optimize"] = _unindexed(tbl)
    out["query_after_append_optimized"] = _run_queries(qfn, Q, tr_full)
    out["open_new_process"] = {"default": _open_child(OPEN_LANCE, [base, d / "Q.npy", "-", "-", "-"]),
                               "recall_0.95_setting": _open_child(OPEN_LANCE, [base, d / "Q.npy", *["-" if x is None else x for x in setting]])}
    out["disk_mb"] = du_mb(base)
    # delete 10% of the sources
    dead = np.load(d / "dead_sources.npy")
    pred = "source IN (" + ",".join(f"'{sid(s * 10)}'" for s in dead) + ")"
    t = time.perf_counter(); tbl.delete(pred); dd = time.perf_counter() - t
    out["delete"] = {"rows": int(meta["deleted_rows"]), "sources": len(dead), "s": round(dd, 3), "how": "one delete(source IN (...))",
                     "count_after": tbl.count_rows(), "index_rows": _unindexed(tbl)}
    out["query_after_delete"] = _run_queries(qfn, Q, tr_del)
    out["query_after_delete_default"] = _run_queries(_lance_query(tbl, (None, None, None)), Q[:NQ_LAT], tr_del[:NQ_LAT])
    out["disk_mb_after_delete"] = du_mb(base)
    from datetime import timedelta
    t = time.perf_counter(); tbl.optimize(cleanup_older_than=timedelta(0), delete_unverified=True); do = time.perf_counter() - t
    out["clean_index"] = {"how": "optimize(cleanup_older_than=0): compaction + index update + old versions removed", "optimize_s": round(do, 2),
                          "index_rows": _unindexed(tbl), "versions_after": len(tbl.list_versions())}
    out["query_after_optimize"] = _run_queries(qfn, Q, tr_del)
    t = time.perf_counter(); _lance_index(tbl, best, tbl.count_rows()); out["clean_index"]["full_reindex_s"] = round(time.perf_counter() - t, 2)
    out["query_after_reindex"] = _run_queries(qfn, Q, tr_del)
    tbl.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
    out["disk_mb_after_cleanup"] = du_mb(base)
    out["peak_rss_mb"] = hwm_mb()
    return out


# --------------------------------------------------------------------------------------------------------------------
# kill loops
def checksum_lance(path):
    import lancedb
    tbl = lancedb.connect(str(path)).open_table("chunks")
    a = tbl.to_arrow().select(["id", "vector"]).sort_by("id")
    h = hashlib.sha256("\n".join(a.column("id").to_pylist()).encode())
    h.update(np.asarray(a.column("vector").combine_chunks().flatten(), dtype=np.float32).tobytes())
    return tbl, a.num_rows, h.hexdigest()[:16]

def checksum_faiss(path):
    from local_knowledge_trainer.vector_store import load_store
    s = load_store(str(path), readonly=True)
    ids = sorted(s.ids())
    h = hashlib.sha256("\n".join(ids).encode()); h.update(np.ascontiguousarray(s.get_vectors(ids), np.float32).tobytes())
    return s, len(ids), h.hexdigest()[:16]

def writer(kind, path, d):
    "One writer run for the kill loop; prints ready after the imports and the data load, done at the end."
    d, meta, V, Q, T = _load(d)
    nb, na = meta["n_base"], meta["n_all"]
    dead = np.load(d / "dead_sources.npy")
    if kind.startswith("lance"):
        import lancedb
        from lancedb.index import IvfPq
        tbl = lancedb.connect(str(path)).open_table("chunks")
        data = _arrow(V, T, nb, na).read_all()
        print("ready", flush=True)
        if kind == "lance_append":
            tbl.add(data); tbl.create_index("vector", config=IvfPq(distance_type="cosine", num_partitions=32, num_sub_vectors=24), replace=True)
        else:
            tbl.delete("source IN (" + ",".join(f"'{sid(s * 10)}'" for s in dead) + ")"); tbl.optimize()
    else:
        from local_knowledge_trainer.vector_store import load_store, save_store
        from local_knowledge_trainer.persist import WriterLock
        add = np.ascontiguousarray(V[nb:na])
        with WriterLock(path, timeout=60):
            st = load_store(str(path))
            print("ready", flush=True)
            if kind == "faiss_publish": st.add([rid(i) for i in range(nb, na)], add)
            else: st.remove([rid(i) for s in dead for i in range(s * 10, min(nb, s * 10 + 10))]); st.rebuild()
            save_store(st, path, model="bench")
    print("done", flush=True)

def check(kind, path):
    "After a kill, in a new process: readable? count + checksum? a query? a next write?"
    out = {}
    try:
        if kind.startswith("lance"):
            tbl, n, h = checksum_lance(path)
            out.update(readable=True, count=n, checksum=h, version=tbl.version, index=_unindexed(tbl))
            tbl.search(np.ones(DIM, np.float32) / np.sqrt(DIM)).distance_type("cosine").limit(K).to_arrow(); out["query_ok"] = True
            import pyarrow as pa
            tbl.add(pa.table({"id": ["zz"], "text": ["x"], "source": ["zz"], "vector": pa.array([[0.1] * DIM], pa.list_(pa.float32(), DIM))}))
            tbl.delete("id = 'zz'"); out["next_write_ok"] = True
        else:
            from local_knowledge_trainer.vector_store import save_store
            from local_knowledge_trainer.folder import leftovers
            from local_knowledge_trainer.persist import WriterLock
            import warnings
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                s, n, h = checksum_faiss(path)
            out.update(readable=True, count=n, checksum=h, warnings=[str(x.message)[:120] for x in w], leftovers=[p.name for p in leftovers(path)])
            s.search(np.ones(DIM, np.float32), K); out["query_ok"] = True
            with WriterLock(path, timeout=10): save_store(s, path, model="bench")
            out["next_write_ok"] = True; out["leftovers_after_next_write"] = [p.name for p in leftovers(path)]
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return out

def _child(args, kill_after=None):
    p = subprocess.Popen([PY, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = p.stdout.readline()
    t0 = time.perf_counter()
    if line.strip() != "ready":
        p.wait(); return {"code": p.returncode, "err": p.stderr.read()[-500:]}
    if kill_after is not None:
        time.sleep(kill_after)
        if p.poll() is None: os.kill(p.pid, signal.SIGKILL)
    rest = p.stdout.read(); p.wait()
    return {"code": p.returncode, "work_s": time.perf_counter() - t0, "done": "done" in rest, "err": p.stderr.read()[-500:]}

def kill_loops(d:Path, kills:int, loops=("lance_append", "lance_delete", "faiss_publish", "faiss_delete")):
    "Templates, calibration, then `kills` SIGKILLs per loop; each followed by a check in a new process."
    import lancedb
    from lancedb.index import IvfPq
    from local_knowledge_trainer.vector_store import make_vector_store, save_store
    from local_knowledge_trainer.persist import WriterLock
    _, meta, V, Q, T = _load(d)
    nb = meta["n_base"]
    tl = d / "tpl_lance"; tf = d / "tpl_faiss"
    for p in (tl, tf): shutil.rmtree(p, ignore_errors=True)
    tbl = lancedb.connect(str(tl)).create_table("chunks", data=_arrow(V, T, 0, nb))
    tbl.create_index("vector", config=IvfPq(distance_type="cosine", num_partitions=32, num_sub_vectors=24), replace=True)
    st = make_vector_store("faiss", DIM); st.add([rid(i) for i in range(nb)], np.asarray(V[:nb]))
    with WriterLock(tf): save_store(st, tf, model="bench")
    del tbl, st
    rng, res = random.Random(SEED), {"rows": nb, "append_rows": meta["n_all"] - nb, "deleted_rows_of_base": None, "loops": {}}
    for kind in loops:
        tpl = tl if kind.startswith("lance") else tf
        work = d / f"kill_{kind}"
        def fresh():
            shutil.rmtree(work, ignore_errors=True); shutil.copytree(tpl, work)
            for f in ("write.lock", "write.lock.json"): (work / f).unlink(missing_ok=True)
        def chk():
            r = subprocess.run([PY, __file__, "--check", kind, str(work)], capture_output=True, text=True, cwd=ROOT, timeout=600)
            try: return json.loads(r.stdout.strip().splitlines()[-1])
            except Exception: return {"error": f"checker exit {r.returncode}: {r.stderr[-400:]}"}
        fresh(); old = chk()
        durs, new = [], None
        for _ in range(2):
            fresh(); r = _child(["--writer", kind, str(work), str(d)])
            if r["code"] != 0: res["loops"][kind] = {"error": r}; break
            durs.append(r["work_s"]); new = chk()
        if kind in res["loops"]: continue
        dur = float(np.median(durs)); recs = []
        states = {(old.get("count"), old.get("checksum")): "old", (new.get("count"), new.get("checksum")): "new"}
        for i in range(kills):
            fresh(); delay = rng.uniform(0, dur)
            r = _child(["--writer", kind, str(work), str(d)], kill_after=delay)
            c = chk()
            state = states.get((c.get("count"), c.get("checksum")), "OTHER" if c.get("readable") else "UNREADABLE")
            recs.append({"delay_s": round(delay, 3), "killed": r["code"] == -signal.SIGKILL, "state": state,
                         **{k: c.get(k) for k in ("count", "query_ok", "next_write_ok", "error", "index", "warnings", "leftovers")
                            if c.get(k) not in (None, [], {})}})
            log(f"kill {kind} {i + 1}/{kills}: delay {delay:.2f}/{dur:.2f}s -> {state} {c.get('error', '')}")
        ok = [x for x in recs if x["state"] in ("old", "new") and x.get("query_ok") and x.get("next_write_ok")]
        res["loops"][kind] = {"work_s": round(dur, 3), "old": {"count": old.get("count"), "checksum": old.get("checksum")},
                              "new": {"count": new.get("count"), "checksum": new.get("checksum")},
                              "kills": sum(x["killed"] for x in recs), "iterations": len(recs), "old_or_new_and_writable": len(ok),
                              "states": {s: sum(x["state"] == s for x in recs) for s in sorted({x["state"] for x in recs})},
                              "records": recs}
        shutil.rmtree(work, ignore_errors=True)
    return res


# --------------------------------------------------------------------------------------------------------------------
def ratios(f, l):
    "lance / faiss ratios of the headline numbers (>1: lance larger)."
    def g(o, *p):
        for k in p:
            if not isinstance(o, dict) or k not in o: return None
            o = o[k]
        return o
    li = l["lifecycle"]["index"]; s95 = g(l, "indexes", li, "for_recall_0.95_all_queries") or {}
    pairs = {
        "load_rows_per_s (lance write / sqlite+faiss load incl. publish)": (l["load"]["rows_per_s"], f["load_total_rows_per_s"]),
        "load+index_s (lance write+index / sqlite+faiss+publish)": (l["load"]["s"] + l["indexes"][li]["build_s"],
                                                                     f["load_vectors"]["s"] + f["load_sqlite"]["s"] + f["publish_s"]),
        "append_rows_per_s (lance add+optimize / faiss add+sqlite+publish)": (l["append"]["rows"] / (l["append"]["s"] + l["append"]["optimize_s"]),
                                                                             f["append"]["rows_per_s_incl_publish"]),
        "open_plus_first_query_s (recall 0.95 settings)": (g(l, "open_new_process", "recall_0.95_setting", "open_plus_first_query_s"),
                                                           g(f, "open_new_process", "open_plus_first_query_s")),
        "p50_ms at recall>=0.95 (lance best / faiss ef=128)": (s95.get("p50_ms"), f["query_base"]["p50_ms"]),
        "p95_ms at recall>=0.95": (s95.get("p95_ms"), f["query_base"]["p95_ms"]),
        "p50_ms after delete": (l["query_after_delete"]["p50_ms"], f["query_after_delete"]["p50_ms"]),
        "disk_mb (lance table / sqlite+vector_store)": (l["disk_mb"], f["disk_mb"]["vector_store"] + f["disk_mb"]["sqlite"]),
        "peak_rss_mb": (l["peak_rss_mb"], f["peak_rss_mb"]),
    }
    return {k: (round(a / b, 3) if a and b else None) for k, (a, b) in pairs.items()}

def run_dataset(name, V, Q, work, indexes, note, systems=("numpy", "faiss", "lance"), extra=(), save=lambda r: None):
    d = work / name
    log(f"== {name}: {len(V)} rows, {len(Q)} queries")
    meta = prepare(d, V, Q); meta["vectors"] = note
    res = {"meta": meta}
    for sysname, args in (("numpy", ["--worker", "numpy"]), ("faiss", ["--worker", "faiss", *extra]), ("lance", ["--worker", "lance", "--indexes", ",".join(indexes)])):
        if sysname not in systems: continue
        t, l0 = time.perf_counter(), os.getloadavg()[0]
        r = subprocess.run([PY, __file__, *args, str(d)], capture_output=True, text=True, cwd=ROOT)
        if r.returncode: res[sysname] = {"error": r.stderr[-1500:]}; log(r.stderr[-1500:])
        else: res[sysname] = json.loads(r.stdout.strip().splitlines()[-1])
        res[sysname]["wall_s"] = round(time.perf_counter() - t, 1)
        res[sysname]["loadavg_1m_before_after"] = [round(l0, 2), round(os.getloadavg()[0], 2)]
        log(f"  {sysname}: {res[sysname]['wall_s']} s"); save(res)
    if "error" not in res.get("faiss", {"error": 1}) and "error" not in res.get("lance", {"error": 1}):
        res["ratios_lance_over_sqlite_faiss"] = ratios(res["faiss"], res["lance"])
    for f in ("V.npy", "texts.json"): (d / f).unlink(missing_ok=True)
    shutil.rmtree(d, ignore_errors=True)
    return res

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000])
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--kill-n", type=int, default=20_000)
    ap.add_argument("--indexes", default="IVF_PQ,IVF_HNSW_SQ")
    ap.add_argument("--out", default=str(ROOT / "bench" / "measured" / "lancedb.json"))
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--work", default=None)
    ap.add_argument("--systems", default="numpy,faiss,lance")
    ap.add_argument("--no-rebuild", action="store_true", help="skip the FAISS rebuild after the deletes (long at 1M)")
    ap.add_argument("--merge", action="store_true", help="add to the datasets already in --out instead of replacing the file")
    ap.add_argument("--import", dest="imports", nargs="*", default=[], help="with --merge: also take the datasets and kill_loops of these JSON files")
    ap.add_argument("--worker", default=None); ap.add_argument("--writer", default=None); ap.add_argument("--check", default=None)
    ap.add_argument("rest", nargs="*")
    a = ap.parse_args(argv)
    if a.worker:
        r = worker_lance(a.rest[0], a.indexes.split(",")) if a.worker == "lance" else worker_vec(a.rest[0], a.worker, rebuild=not a.no_rebuild)
        print(json.dumps(r)); return 0
    if a.writer: writer(a.writer, Path(a.rest[0]), a.rest[1]); return 0
    if a.check: print(json.dumps(check(a.check, Path(a.rest[0])))); return 0
    import faiss, lancedb, pyarrow
    work = Path(a.work or tempfile.mkdtemp(prefix="lkt_lance_")); work.mkdir(parents=True, exist_ok=True)
    indexes, systems = a.indexes.split(","), a.systems.split(",")
    extra = ["--no-rebuild"] if a.no_rebuild else []
    out = {"bench": "lancedb_eval", "command": " ".join(["bench/lancedb_eval.py", *sys.argv[1:]]),
           "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "seed": SEED, "k": K, "dim": DIM,
           "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                       "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                       "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), None)},
           "versions": {"lancedb": lancedb.__version__, "pyarrow": pyarrow.__version__, "faiss": faiss.__version__, "numpy": np.__version__,
                        "sqlite": sqlite3.sqlite_version},
           "notes": ["page cache warm for every open (dropping it needs root)",
                     "chunk text is synthetic (~40 words per chunk); sources have 10 chunks; deletes remove 10% of the sources",
                     "peak_rss_mb is VmHWM of each system's own process; it includes the memory-mapped input vectors it touched",
                     "the machine was shared with other jobs during the run (see loadavg_1m_before_after per system): timings are noisy"],
           "datasets": {}}
    if a.merge and Path(a.out).exists():
        prev = json.loads(Path(a.out).read_text())
        out["runs"] = prev.get("runs", [{k: prev.get(k) for k in ("command", "started", "finished")}]) + [{"command": out["command"], "started": out["started"]}]
        out["datasets"] = prev.get("datasets", {}); out["kill_loops"] = prev.get("kill_loops")
        if out["kill_loops"] is None: out.pop("kill_loops")
        for f in a.imports:
            o = json.loads(Path(f).read_text())
            out["datasets"].update(o.get("datasets", {}))
            if o.get("kill_loops"): out["kill_loops"] = o["kill_loops"]
            out["runs"].append({k: o.get(k) for k in ("command", "started", "finished")})
    save = (lambda: None) if a.no_save else (lambda: (Path(a.out).parent.mkdir(parents=True, exist_ok=True), Path(a.out).write_text(json.dumps(out, indent=1))))
    for n in a.sizes:
        n_all = int(round(n * 1.01))
        V, Q = synthetic(n_all, 1000)
        key = f"synthetic_{n}"
        def part(r, key=key): out["datasets"][key] = {**r, "partial": True}; save()
        out["datasets"][key] = run_dataset(key, V, Q, work, indexes, "synthetic: seeded Gaussian mixture of 300 centres in 384-d, "
                                           "sigma 0.06 per coordinate, normalised (stand-in, not real embeddings)", systems, extra, part)
        del V, Q; save()
    if not a.no_real:
        r = real()
        if r is None: out["datasets"]["real_minilm"] = {"skipped": f"{CACHE} missing or too small"}
        else:
            def part(r): out["datasets"]["real_minilm"] = {**r, "partial": True}; save()
            out["datasets"]["real_minilm"] = run_dataset("real_minilm", r[0], r[1], work, indexes,
                                                         f"real all-MiniLM-L6-v2 embeddings from {CACHE} (BEIR chunks); 1,000 held out as queries",
                                                         systems, extra, part)
        save()
    if a.kills:
        V, Q = synthetic(int(round(a.kill_n * 1.01)), 10)
        d = work / "kills"; prepare(d, V, Q)
        t = time.perf_counter(); out["kill_loops"] = kill_loops(d, a.kills); out["kill_loops"]["elapsed_s"] = round(time.perf_counter() - t, 1)
        shutil.rmtree(d, ignore_errors=True); save()
    out["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    save()
    print(json.dumps(out, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
