"""Embedding cache size: the layout before (reproduced here) against the current one, and both against the vectors they cache (JSON on stdout).

A base's embedding cache (cache/embeddings.sqlite) measured 4.5 GB at a million chunks (bench/measured/scale.json), 1.7
times the base's whole vector_store/. This bench fills both layouts with the same N chunks and measures them side by side:

  corpus      REAL TEXT: sentences of the shared BEIR collections (cisi, cacm, pt_faquad, zh_cmrc2018_dev), sampled with
              bench/scale.py's content seed into chunks of at least 80 words, ids as `core.chunk_id` gives them (100 chunks
              a document); vectors from bench/scale.py's stand-in (signed CRC-32 feature hashing into 384 dimensions,
              normalised). A file's size does not depend on the vectors' values.
  sizes       bytes on disk after a checkpoint: the layout before (WITHOUT ROWID table emb keyed by model, chunk id and
              hex text hash, float32 blobs, 4 KB pages), the current one (`EmbeddingCache`), the current one with 4 KB
              pages, and two lossy variants of it that were measured and not taken (24-bit fixed point, float16); the
              raw float32 vectors (N x 384 x 4) and a FaissHNSWStore(384) saved for them (index.faiss + ids.json).
  throughput  vectors a second written by `put_many` in batches of 256 (as `Embedder` commits them) and read back by
              `get_many` in batches of 64 (as an ingest asks) from a fresh cache, before against now, in the same process:
              best of 3 alternating rounds.
  migration   a copy of the file of the layout before, opened by `EmbeddingCache` and used once (the rows move at first
              use): seconds, rows moved (one per distinct text), page size and bytes after, old keys still hitting.
  precision   what the lossy variants would change, on CISI's real all-MiniLM-L6-v2 vectors (read, never written, from
              the bench embedding cache ~/.cache/lkt/beir, else embedded now): largest cosine change and top-10 changes for
              the 76 judged queries and with every document as the query; and the model's own noise, the largest
              difference between float32 embeddings of the same 48 texts in batches of 32, 5 and 1. The current layout
              stores float32: its vectors are bit for bit those embedded.

    nice -n 10 .venv/bin/python bench/cache_size.py                                  # 100,000 chunks, a few minutes
    nice -n 10 .venv/bin/python bench/cache_size.py --out bench/measured/cache_size.json
"""
import argparse, hashlib, json, os, platform, shutil, sqlite3, subprocess, sys, tempfile, threading, time
from collections import OrderedDict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from scale import CHUNK_WORDS, CHUNKS_PER_DOC, SHARED, TimedHashing, sentence_pool   # noqa: E402

DIM, MODEL = 384, "crc-hashing-384"


class OldCache:
    "The embedding cache as LKT wrote it before (table emb, WITHOUT ROWID, float32 blobs): the reference, verbatim."
    def __init__(self, cache_dir, max_mem=20_000):
        self.mem, self._lock, self.max_mem = OrderedDict(), threading.RLock(), int(max_mem)
        self.path = Path(cache_dir) / "embeddings.sqlite"
        self.conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS emb(model TEXT, chunk_id TEXT, text_hash TEXT, "
                          "dim INTEGER, vec BLOB, PRIMARY KEY(model, chunk_id, text_hash)) WITHOUT ROWID")

    def get_many(self, keys, dim):
        with self._lock:
            out = {k: self.mem[k] for k in keys if k in self.mem}
            rest = [k for k in keys if k not in out]
            if rest and self.conn is not None:
                for i in range(0, len(rest), 300):
                    part = rest[i:i+300]
                    q = " OR ".join(["(model=? AND chunk_id=? AND text_hash=?)"] * len(part))
                    rows = self.conn.execute(f"SELECT model, chunk_id, text_hash, dim, vec FROM emb WHERE {q}",
                                             [x for k in part for x in k])
                    for m, c, h, d, blob in rows:
                        v = np.frombuffer(blob, dtype=np.float32)
                        if d != dim or v.size != dim: continue
                        self.mem[(m, c, h)] = out[(m, c, h)] = v.copy()
                self._trim()
            return out

    def _trim(self):
        while len(self.mem) > self.max_mem: self.mem.popitem(last=False)

    def put_many(self, items):
        with self._lock:
            self.mem.update(items)
            if self.conn is None or not items: self._trim(); return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.executemany("INSERT OR REPLACE INTO emb VALUES (?,?,?,?,?)",
                                      [(*k, int(v.size), np.asarray(v, np.float32).tobytes()) for k, v in items.items()])
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK"); raise
            self._trim()

    def close(self):
        if self.conn is not None: self.conn.close(); self.conn = None


def corpus(n:int)->tuple:
    "n chunk texts of at least CHUNK_WORDS words from the shared collections (content-seeded) and their chunk ids."
    from local_knowledge_trainer.core import chunk_id
    from local_knowledge_trainer.text import count_words
    sents, seed = sentence_pool()
    rng = np.random.default_rng(seed)
    words = np.array([max(1, count_words(s)) for s in sents])
    draw, j, texts = rng.integers(len(sents), size=n * 12), 0, []
    while len(texts) < n:
        parts, w = [], 0
        while w < CHUNK_WORDS:
            if j == len(draw): draw, j = rng.integers(len(sents), size=n * 12), 0
            i = draw[j]; j += 1; parts.append(sents[i]); w += words[i]
        texts.append(" ".join(parts))
    ids, seen = [], set()
    for i, t in enumerate(texts):   # a salt parts chunks of one document whose first 100 characters coincide, as the parser does
        salt, cid = 0, chunk_id(f"d{i // CHUNKS_PER_DOC:06d}.txt", t)
        while cid in seen: salt += 1; cid = chunk_id(f"d{i // CHUNKS_PER_DOC:06d}.txt", t, salt=salt)
        seen.add(cid); ids.append(cid)
    return texts, ids


def file_bytes(path:Path)->int:
    "A SQLite file's bytes after a checkpoint (its -wal emptied), plus whatever -wal remains."
    c = sqlite3.connect(str(path), isolation_level=None); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def fill(cache, keys:list, X:np.ndarray)->float:
    "Seconds to put every vector, 256 to a transaction."
    t = time.perf_counter()
    for i in range(0, len(keys), 256): cache.put_many(dict(zip(keys[i:i + 256], X[i:i + 256])))
    return time.perf_counter() - t


def read_all(cache, keys:list)->tuple:
    "Seconds to get every key, 64 at a time, and the vectors found."
    t, n = time.perf_counter(), 0
    for i in range(0, len(keys), 64): n += len(cache.get_many(keys[i:i + 64], DIM))
    return time.perf_counter() - t, n


def variant_file(path:Path, keys:list, X:np.ndarray, page:int, encode)->int:
    "The current layout with another page size or blob encoding (the sizes of what was considered): its bytes."
    from local_knowledge_trainer.embeddings import cache_key
    c = sqlite3.connect(str(path), isolation_level=None)
    c.execute(f"PRAGMA page_size={page}"); c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE models(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)"); c.execute("INSERT INTO models(name) VALUES (?)", (MODEL,))
    c.execute("CREATE TABLE vectors(key BLOB NOT NULL UNIQUE, model INTEGER NOT NULL, vec BLOB NOT NULL)")
    for i in range(0, len(keys), 256):
        c.execute("BEGIN"); c.executemany("INSERT OR REPLACE INTO vectors VALUES (?,1,?)",
                                          [(cache_key(k[0], k[2]), encode(v)) for k, v in zip(keys[i:i + 256], X[i:i + 256])]); c.execute("COMMIT")
    c.close()
    return file_bytes(path)


def int24(v): return np.rint(np.asarray(v, np.float64) * 2**22).astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
def round24(X): return (np.rint(X.astype(np.float64) * 2**22) / 2**22).astype(np.float32)
def round16(X): return X.astype(np.float16).astype(np.float32)


def rank_changes(A:np.ndarray, B:np.ndarray, Q:np.ndarray, Qb:np.ndarray, self_query:bool=False)->dict:
    "Largest cosine change and how many queries' top-10 change (order, set) between documents A, queries Q and A', Q'."
    S, Sb = Q @ A.T, Qb @ B.T
    if self_query: np.fill_diagonal(S, -9); np.fill_diagonal(Sb, -9)
    t, tb = np.argsort(-S, axis=1, kind="stable")[:, :10], np.argsort(-Sb, axis=1, kind="stable")[:, :10]
    off = ~np.eye(len(S), dtype=bool) if self_query else np.ones(S.shape, bool)
    return {"queries": len(Q), "max_abs_cosine_change": float(np.abs(S - Sb)[off].max()),
            "top10_order_changed": int((t != tb).any(1).sum()), "top10_set_changed": int(sum(set(a) != set(b) for a, b in zip(t, tb)))}


def precision()->dict:
    "What float16 and 24-bit storage would change on CISI's real all-MiniLM-L6-v2 vectors, and the model's own noise."
    from local_knowledge_trainer.beir import load_beir
    from local_knowledge_trainer.embeddings import Embedder, EmbeddingCache, lkt_cache_dir, text_hash
    from local_knowledge_trainer.store_schema import read_connection
    if not (SHARED / "cisi").exists(): return {"skipped": f"{SHARED / 'cisi'} not found"}
    corpus_, queries, _ = load_beir(SHARED / "cisi")
    dt = [(d["title"] + "\n" + d["text"]).strip()[:4000] for d in corpus_.values()]   # as beir.BeirIndex embeds them
    qt = list(queries.values())
    model, db = "all-MiniLM-L6-v2", lkt_cache_dir() / "beir" / "embeddings.sqlite"
    keys, got = [(model, "", text_hash(t)) for t in dt + qt], {}
    if db.exists():
        c = EmbeddingCache(); c.conn, _ = read_connection(db)   # read-only: the shared cache is not migrated here
        got = c.get_many(keys, DIM); c.close()
    emb = Embedder(model, threads=1)
    if all(k in got for k in keys): E, source = np.stack([got[k] for k in keys]), f"{db} (read-only), float32 as embedded"
    else: E, source = emb.encode(dt + qt), "embedded now (all-MiniLM-L6-v2, float32)"
    D, Q = E[:len(dt)], E[len(dt):]
    out = {"collection": "cisi", "vectors": source, "documents": len(D), "queries": len(Q)}
    for name, f in (("fixed_point_24bit", round24), ("float16", round16)):
        out[name] = {"max_abs_component_change": float(np.abs(f(D) - D).max()),
                     "judged_queries": rank_changes(D, f(D), Q, f(Q)),
                     "every_document_as_query": rank_changes(D, f(D), D, f(D), self_query=True)}
    T = dt[:48]
    A, B, C = emb.encode(T), np.vstack([emb.encode(T[i:i + 5]) for i in range(0, 48, 5)]), np.vstack([emb.encode([t]) for t in T[:16]])
    out["model_noise"] = {"texts": 48, "max_abs_component_change_batch32_vs_batch5": float(np.abs(A - B).max()),
                          "max_abs_component_change_batch32_vs_single": float(np.abs(A[:16] - C).max())}
    return out


def git()->dict:
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True).stdout.strip())
        return {"commit": commit, "dirty": dirty}
    except OSError: return {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="chunks")
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--no-precision", action="store_true", help="skip the real-vector precision section")
    a = ap.parse_args()
    if not SHARED.exists():
        print(json.dumps({"skipped": f"{SHARED} not found: the bench samples its text from the shared collections"})); return
    import faiss, local_knowledge_trainer
    from local_knowledge_trainer.embeddings import EmbeddingCache, text_hash
    from local_knowledge_trainer.vector_store import FaissHNSWStore
    t0 = time.perf_counter()
    texts, ids = corpus(a.n)
    X = np.asarray(TimedHashing().encode_passages(texts), np.float32)
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    keys = [(MODEL, i, text_hash(t)) for i, t in zip(ids, texts)]
    res = {"bench": "cache_size", "command": "nice -n 10 .venv/bin/python bench/cache_size.py" + (f" --n {a.n}" if a.n != 100_000 else ""),
           "n_chunks": a.n, "distinct_texts": len({k[2] for k in keys}), "distinct_chunk_ids": len(set(ids)), "dim": DIM,
           "corpus": "real sentences of " + ", ".join(("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")) +
                     f" (bench/scale.py's content seed) in chunks of >= {CHUNK_WORDS} words; vectors: bench/scale.py's "
                     "TimedHashing stand-in, normalised"}
    work = Path(tempfile.mkdtemp(prefix="lkt_cache_size_", dir=os.environ.get("LKT_BENCH_TMP")))
    try:
        (work / "before").mkdir(); (work / "now").mkdir()
        old, new = OldCache(work / "before"), EmbeddingCache(work / "now")
        put = {"before": fill(old, keys, X), "now": fill(new, keys, X)}
        old.close(); new.close()
        sizes = {"before": file_bytes(work / "before" / "embeddings.sqlite"), "now": file_bytes(work / "now" / "embeddings.sqlite")}
        (work / "v").mkdir()
        sizes["now_with_4k_pages"] = variant_file(work / "v" / "p4k.sqlite", keys, X, 4096, lambda v: np.asarray(v, "<f4").tobytes())
        sizes["fixed_point_24bit_not_taken"] = variant_file(work / "v" / "i24.sqlite", keys, X, 8192, int24)
        sizes["float16_not_taken"] = variant_file(work / "v" / "f16.sqlite", keys, X, 8192, lambda v: np.asarray(v, "<f2").tobytes())
        sizes["raw_float32"] = a.n * DIM * 4
        h = FaissHNSWStore(DIM); t = time.perf_counter(); h.add(ids, X); hnsw_s = time.perf_counter() - t
        h.save(work / "hnsw"); files = {p.name: p.stat().st_size for p in (work / "hnsw").iterdir() if p.is_file()}
        sizes["faiss_hnsw_store"] = sum(files.values())
        res["sizes_bytes"] = sizes
        res["hnsw"] = {"files": files, "params": h.params(), "build_s": round(hnsw_s, 1)}
        res["bytes_per_vector"] = {k: round(v / a.n, 1) for k, v in sizes.items()}
        hn = sizes["faiss_hnsw_store"]
        res["ratios"] = {"now_over_before": round(sizes["now"] / sizes["before"], 4),
                         "now_over_faiss_hnsw_store": round(sizes["now"] / hn, 4),
                         "now_over_raw_float32": round(sizes["now"] / sizes["raw_float32"], 4),
                         "before_over_faiss_hnsw_store": round(sizes["before"] / hn, 4),
                         "fixed_point_24bit_over_faiss_hnsw_store": round(sizes["fixed_point_24bit_not_taken"] / hn, 4),
                         "float16_over_faiss_hnsw_store": round(sizes["float16_not_taken"] / hn, 4)}
        res["goal_half_of_vector_store"] = {"now": sizes["now"] <= hn / 2, "fixed_point_24bit": sizes["fixed_point_24bit_not_taken"] <= hn / 2,
                                            "float16": sizes["float16_not_taken"] <= hn / 2}
        scale = ROOT / "bench" / "measured" / "scale.json"
        if scale.exists():   # the published vector_store/ of a real base (HNSW, BM25, confidence models) at a million chunks
            s = json.loads(scale.read_text())["sizes"]["1000000"]["ingest"]
            per = s["disk_mb"]["vector_store"] * 2**20 / s["chunks"]
            res["published_vector_store_at_1m"] = {"source": "bench/measured/scale.json", "chunks": s["chunks"],
                                                   "vector_store_mb": s["disk_mb"]["vector_store"], "cache_mb_before": s["disk_mb"]["cache"],
                                                   "bytes_per_vector": round(per, 1),
                                                   "now_over_it": round(sizes["now"] / a.n / per, 4)}
        # throughput: fresh caches (empty memory) on the files just written, alternating, best of 3
        best = {"before": [], "now": []}
        for _ in range(3):
            for name, mk in (("before", lambda: OldCache(work / "before")), ("now", lambda: EmbeddingCache(work / "now"))):
                c = mk(); s, found = read_all(c, keys); c.close(); best[name].append(s)
                assert found == a.n, (name, found)
        g = {k: a.n / min(v) for k, v in best.items()}
        res["throughput_vectors_per_s"] = {
            "get_many": {"before": round(g["before"]), "now": round(g["now"]), "now_over_before": round(g["now"] / g["before"], 3),
                         "batch": 64, "rounds": 3},
            "put_many": {"before": round(a.n / put["before"]), "now": round(a.n / put["now"]),
                         "now_over_before": round(put["before"] / put["now"], 3), "batch": 256, "rounds": 1}}
        c = EmbeddingCache(work / "now"); v = c.get_many(keys[:1000], DIM); c.close()
        res["now_bit_for_bit"] = bool(all(np.array_equal(v[k], x) for k, x in zip(keys[:1000], X[:1000])))
        # migration of the file written before
        (work / "mig").mkdir(); shutil.copy(work / "before" / "embeddings.sqlite", work / "mig" / "embeddings.sqlite")
        t = time.perf_counter(); c = EmbeddingCache(work / "mig"); rows = len(c); mig_s = time.perf_counter() - t   # moved at first use
        moved, page = c.migrated, c.conn.execute("PRAGMA page_size").fetchone()[0]
        v = c.get_many(keys[:1000], DIM); c.close()
        res["migration"] = {"seconds": round(mig_s, 1), "rows_before": a.n, "rows_moved": moved, "rows_after": rows, "page_size_after": page,
                            "bytes_after": file_bytes(work / "mig" / "embeddings.sqlite"),
                            "old_keys_hit_bit_for_bit": bool(len(v) == 1000 and all(np.array_equal(v[k], x) for k, x in zip(keys[:1000], X[:1000])))}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not a.no_precision: res["precision"] = precision()
    res["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                      "faiss": faiss.__version__, "numpy": np.__version__, "lkt": local_knowledge_trainer.__version__}
    res["code"] = {"git": git()}
    res["elapsed_s"] = round(time.perf_counter() - t0, 1)
    s = json.dumps(res, indent=1)
    print(s)
    if a.out: Path(a.out).write_text(s + "\n")


if __name__ == "__main__":
    main()
