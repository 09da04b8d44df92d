"""ANN index candidates for a base past 100k vectors: recall@10 vs exact, latency at 1 and 2 threads, build, size, load, RSS (JSON).

The vectors are those of bench/scale.py: real text sampled from the shared collections (its `make_corpus`), cut by the
library's chunker (`chunks_from_units`, 80-word windows, no overlap, as the trainer cuts a .txt file) and embedded by its
stand-in (`TimedHashing`: signed CRC-32 feature hashing of the words into 384 dimensions), rows of unit norm as `Embedder`
returns them; the queries are scale.py's 200 held-out query strings embedded the same way. Vectors are cached as .npy
under $LKT_ANN_DIR (default /tmp/lkt_ann), never in the repository. Exact top-10 comes from a blocked numpy matmul; a
returned result counts when its exact cosine reaches the exact 10th (as bench/scale.py counts), and by ids alone.
A second query set, midpoints of two stored vectors (what `FaissHNSWStore.calibrate` samples), shows how a calibration
on the store's own vectors predicts the recall of real queries.

Every candidate is built at 2 threads, written with faiss.write_index, then read back in fresh processes (plain and
with each mmap flag faiss accepts for that type) to time the load, the first query and the RSS. Latency is one query
per search call, p50/p95 over the 200 queries, at 1 thread and at 2 threads (faiss.omp_set_num_threads). The HNSW M=32
efConstruction=64 of `FaissHNSWStore` is the reference of each size, timed in the same run (the machine is shared).

    nice -n 10 .venv/bin/python bench/ann_scale.py                      # 200k, then 1M for the candidates that pass at 200k
    nice -n 10 .venv/bin/python bench/ann_scale.py --sizes 200000 --candidates hnsw32 ivf_flat
    # add candidates to a saved run (how bench/measured/ann_scale.json got its PQ fast-scan rows):
    nice -n 10 .venv/bin/python bench/ann_scale.py --merge --no-real --sizes 200000 1000000 --large pq192x4fs_refine
"""
import argparse, gc, hashlib, json, os, platform, sqlite3, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "bench"))
WORK = Path(os.environ.get("LKT_ANN_DIR", "/tmp/lkt_ann"))
OUT = ROOT / "bench" / "measured" / "ann_scale.json"
K, TARGET, N_MID = 10, 0.95, 200
DENSE_P50_BUDGET_MS = 8.0   # hybrid p50 21.3 ms had dense 12.4 ms at 1M (scale_1m_before): the rest is ~9 ms of a 20 ms goal
HNSW_EF = (128, 256, 512, 1024, 2048)
IVF_FRACTIONS = (256, 128, 64, 32, 16, 8, 4)   # nprobe = nlist / these (a sweep stops once recall reaches 0.995)


def status(field:str)->float:
    "A /proc/self/status field (VmRSS, VmHWM, RssAnon, RssFile) in MB."
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"): return int(line.split()[1]) / 1024
    return 0.0


def normalise(V):
    import numpy as np
    n = np.linalg.norm(V, axis=1, keepdims=True)
    return (V / np.where(n > 0, n, 1)).astype(np.float32)   # as Embedder._encode: a zero row stays zero


# ---------------------------------------------------------------- vectors
def stand_in_vectors(n:int)->tuple:
    "(X, Q, info): scale.py's corpus of n chunks cut by the library's chunker and its queries, embedded by TimedHashing; cached."
    import numpy as np
    fx, fq, fi = WORK / f"X_{n}.npy", WORK / f"Q_{n}.npy", WORK / f"info_{n}.json"
    if fx.exists() and fq.exists() and fi.exists():
        return np.load(fx), np.load(fq), {**json.loads(fi.read_text()), "cached": True}
    import shutil
    from scale import make_corpus, TimedHashing, CHUNK_WORDS
    from local_knowledge_trainer.chunking import make_unit, chunks_from_units
    WORK.mkdir(parents=True, exist_ok=True)
    folder = WORK / f"corpus_{n}"
    t = time.perf_counter(); info = make_corpus(n, folder); info["generate_s"] = round(time.perf_counter() - t, 1)
    backend = TimedHashing()
    t = time.perf_counter(); parts, n_chunks, buf = [], 0, []
    def flush():
        if buf: parts.append(normalise(backend.encode_passages(buf))); buf.clear()
    for f in sorted(folder.iterdir()):
        text = f.read_text(encoding="utf-8")
        # a .txt file is one unit (readers.text_units); the trainer's chunk_size=80, chunk_overlap=0
        chunks, _ = chunks_from_units(f.name, [make_unit(text, section=None, lineno=1)], CHUNK_WORDS, 0, "text")
        buf += [c.text for c in chunks]; n_chunks += len(chunks)
        if len(buf) >= 8192: flush()
    flush()
    X = np.concatenate(parts); del parts
    qs = json.loads((WORK / f"queries_{n}.json").read_text())
    Q = normalise(backend.encode_passages(qs))   # a symmetric backend: encode_queries = encode_passages
    info.update(chunks=int(len(X)), queries=len(qs), chunk_and_encode_s=round(time.perf_counter() - t, 1),
                encode_s=round(backend.seconds, 1))
    np.save(fx, X); np.save(fq, Q); fi.write_text(json.dumps(info))
    shutil.rmtree(folder, ignore_errors=True)
    return X, Q, {**info, "cached": False}


def real_vectors()->tuple:
    "(X, Q, info) of real all-MiniLM-L6-v2 vectors from the bench embedding cache, split as bench/scale.py real_recall splits them."
    import numpy as np
    db = Path(os.environ.get("LKT_CACHE_DIR", Path.home() / ".cache" / "lkt")) / "beir" / "embeddings.sqlite"
    if not db.exists(): return None, None, {"skipped": f"{db} not found (run bench/quality.py first)"}
    from local_knowledge_trainer.embeddings import EmbeddingCache
    from local_knowledge_trainer.store_schema import read_connection
    cache = EmbeddingCache(); cache.conn, _ = read_connection(db)   # either layout of the cache, read only
    V = np.unique(cache.model_vectors("all-MiniLM-L6-v2", 384), axis=0)
    rng = np.random.default_rng(int(hashlib.sha256(V[:100].tobytes()).hexdigest()[:16], 16))
    perm = rng.permutation(len(V))
    return (np.ascontiguousarray(normalise(V[perm[1000:]])), np.ascontiguousarray(normalise(V[perm[:1000]])),
            {"source": str(db), "model": "all-MiniLM-L6-v2", "vectors": int(len(V) - 1000), "queries": 1000})


def midpoints(X, n_q:int=N_MID):
    "Midpoints of random pairs of stored vectors, seeded by the data (the queries `FaissHNSWStore.calibrate` draws)."
    import numpy as np
    rng = np.random.default_rng(int(hashlib.sha256(X[:: max(1, len(X) // 1000)].tobytes()).hexdigest()[:16], 16))
    p = rng.choice(len(X), size=(n_q, 2))
    return normalise(X[p[:, 0]] + X[p[:, 1]])


def exact_top(X, Q, k:int=K, block:int=65536)->tuple:
    "Exact top-k (scores descending, row ids) of each query by blocked matmul."
    import numpy as np
    best = np.full((len(Q), k), -np.inf, np.float32); bid = np.zeros((len(Q), k), np.int64)
    for s in range(0, len(X), block):
        S = Q @ X[s:s + block].T
        cs = np.concatenate([best, S], 1); cr = np.concatenate([bid, np.broadcast_to(np.arange(s, s + S.shape[1]), S.shape)], 1)
        top = np.argpartition(-cs, k - 1, axis=1)[:, :k]
        best, bid = np.take_along_axis(cs, top, 1), np.take_along_axis(cr, top, 1)
    o = np.argsort(-best, axis=1)
    return np.take_along_axis(best, o, 1), np.take_along_axis(bid, o, 1)


def contrast(X, Q, ranks=(1, 10, 11, 20, 100, 1000), block:int=65536)->dict:
    "Median exact cosine at some ranks, rows within 0.01 of the 10th, and the queries' non-zero dimensions: how hard the queries are."
    import numpy as np
    top = max(ranks); best = np.full((len(Q), top), -np.inf, np.float32)
    for s in range(0, len(X), block):
        cs = np.concatenate([best, Q @ X[s:s + block].T], 1)
        best = np.take_along_axis(cs, np.argpartition(-cs, top - 1, axis=1)[:, :top], 1)
    best = -np.sort(-best, axis=1)
    return {"median_cosine_at_rank": {str(r): round(float(np.median(best[:, r - 1])), 4) for r in ranks},
            "median_rows_within_0.01_of_10th": float(np.median((best >= best[:, 9:10] - 0.01).sum(1))),
            "median_nonzero_dims": float(np.median((np.abs(Q) > 0).sum(1)))}


def recall(X, Q, I, ex_s, ex_i)->tuple:
    "(recall by score: a returned row whose exact cosine reaches the exact k-th counts; recall by ids)."
    import numpy as np
    ok = I >= 0
    S = np.einsum("qkd,qd->qk", X[np.where(ok, I, 0)], Q)
    by_score = ((S >= ex_s[:, -1:] - 1e-6) & ok).sum(1) / K
    by_ids = np.array([len(set(a.tolist()) & set(b[b >= 0].tolist())) for a, b in zip(ex_i, I)]) / K
    return round(float(by_score.mean()), 4), round(float(by_ids.mean()), 4)


# ---------------------------------------------------------------- candidates
def pow2_near(x:float)->int:
    import math
    return 2 ** max(4, round(math.log2(max(x, 16))))


def candidates(n:int)->dict:
    "name -> (factory string, build settings, search sweep as ParameterSpace strings)."
    nlist = pow2_near(n / 244)   # ~244 vectors a list: 4096 at 1M, 1024 at 200k, 16 at a few thousand
    probes = sorted({max(1, nlist // f) for f in IVF_FRACTIONS})
    ef = [f"efSearch={e}" for e in HNSW_EF]
    return {
        "hnsw32": ("HNSW32,Flat", {"efConstruction": 64}, ef),   # FaissHNSWStore today
        "hnsw48_efc128": ("HNSW48,Flat", {"efConstruction": 128}, ef),
        "ivf_flat": (f"IVF{nlist},Flat", {}, [f"nprobe={p}" for p in probes]),
        "ivf_sq8_refine": (f"IVF{nlist},SQ8,RFlat", {}, [f"nprobe={p},k_factor_rf=4" for p in probes]),
        "ivf_pq4fs_refine": (f"IVF{nlist},PQ192x4fs,RFlat", {}, [f"nprobe={p},k_factor_rf=16" for p in probes]),
        "pca128_hnsw32_refine": ("PCA128,HNSW32,RFlat", {"efConstruction": 64}, [f"efSearch={e},k_factor_rf=4" for e in HNSW_EF]),
        # no partition, no graph: every vector's 4-bit PQ code is scanned (SIMD fast scan), the best k x k_factor re-ranked exactly
        "pq192x4fs_refine": ("PQ192x4fs,RFlat", {}, [f"k_factor_rf={f}" for f in (8, 16, 32, 64, 128, 256, 512, 1024, 2048)]),
        "pq96x4fs_refine": ("PQ96x4fs,RFlat", {}, [f"k_factor_rf={f}" for f in (16, 32, 64, 128, 256, 512, 1024, 2048)]),
        # one dimension a sub-quantiser: a 4-bit scalar code of every coordinate, scanned by the same SIMD kernel
        "pq384x4fs_refine": ("PQ384x4fs,RFlat", {}, [f"k_factor_rf={f}" for f in (4, 8, 16, 32, 64, 128, 256, 512, 1024)]),
        "exact_flat": ("Flat", {}, ["exact"]),   # the latency every index must beat
    }


def build(factory:str, opts:dict, X, seed:int):
    "The index built at 2 threads; IVF coarse quantisers trained by spherical k-means on 40 x nlist sampled rows."
    import faiss, numpy as np
    faiss.omp_set_num_threads(2)
    index = faiss.index_factory(X.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None: ivf.cp.spherical = True
    for hn in _hnsw_of(index): hn.hnsw.efConstruction = opts.get("efConstruction", 40)
    if not index.is_trained:
        m = min(len(X), 40 * (ivf.nlist if ivf is not None else 256), 200_000)
        sample = np.sort(np.random.default_rng(seed).choice(len(X), size=m, replace=False))
        index.train(np.ascontiguousarray(X[sample]))
    for s in range(0, len(X), 100_000): index.add(X[s:s + 100_000])
    return index


def _hnsw_of(index):
    import faiss
    out, seen = [], index
    for _ in range(4):
        seen = faiss.downcast_index(seen)
        if isinstance(seen, faiss.IndexHNSW): out.append(seen); break
        nxt = getattr(seen, "base_index", None) or getattr(seen, "index", None)
        if nxt is None: break
        seen = nxt
    return out


def set_params(index, setting:str):
    "Apply a ParameterSpace string ('exact': nothing to set)."
    import faiss
    if setting != "exact": faiss.ParameterSpace().set_index_parameters(index, setting)


def latency(index, Q, setting:str, threads:int, pmode:int=None)->dict:
    "p50/p95 ms of single-query searches at `threads` threads (after 5 warm-up queries)."
    import faiss, numpy as np
    faiss.omp_set_num_threads(threads)
    set_params(index, setting)
    ivf = faiss.try_extract_index_ivf(index)
    old = None
    if pmode is not None and ivf is not None: old, ivf.parallel_mode = ivf.parallel_mode, pmode
    for q in Q[:5]: index.search(q[None], K)
    ms = []
    for q in Q:
        t = time.perf_counter(); index.search(q[None], K); ms.append((time.perf_counter() - t) * 1000)
    if old is not None: ivf.parallel_mode = old
    return {"p50": round(float(np.percentile(ms, 50)), 3), "p95": round(float(np.percentile(ms, 95)), 3)}


def load_job(path:str, setting:str, flag:str, qfile:str)->dict:
    "In a fresh process: read_index time, RSS, first query and 200 queries' RSS (run via --job load)."
    import faiss, numpy as np
    Q = np.load(qfile)
    faiss.omp_set_num_threads(1)
    base = {f: status(f) for f in ("VmRSS", "RssAnon", "RssFile")}
    flags = {"plain": 0, "mmap": faiss.IO_FLAG_MMAP, "mmap_ifc": faiss.IO_FLAG_MMAP_IFC}[flag]
    t = time.perf_counter()
    try: index = faiss.read_index(path, flags) if flags else faiss.read_index(path)
    except Exception as e: return {"error": f"{type(e).__name__}: {str(e)[:160]}"}
    load = time.perf_counter() - t
    after = {f: round(status(f) - base[f]) for f in base}
    set_params(index, setting)
    t = time.perf_counter(); index.search(Q[:1], K); first = time.perf_counter() - t
    for q in Q: index.search(q[None], K)
    return {"load_s": round(load, 3), "first_query_ms": round(first * 1000, 2), "load_plus_first_s": round(load + first, 3),
            "type": type(faiss.downcast_index(index)).__name__,
            "rss_mb_added_by_load": after, "rss_mb_added_after_200_queries": round(status("VmRSS") - base["VmRSS"])}


def run_candidate(name, spec, X, Q, Qm, ex, exm, tag:str, load:bool=True, pmode_check:bool=True)->dict:
    "Build, sweep the search settings (recall on both query sets, latency at 1 and 2 threads), write, reload."
    import faiss
    factory, opts, sweep = spec
    gc.collect()
    la0 = os.getloadavg()[0]
    t = time.perf_counter(); index = build(factory, opts, X, seed=len(X)); b = time.perf_counter() - t
    row = {"factory": factory, **opts, "build_s": round(b, 1), "rss_mb_after_build": round(status("VmRSS")), "settings": {}}
    faiss.omp_set_num_threads(2)
    for s in sweep:
        set_params(index, s)
        r = {}
        _, I = index.search(Q, K); r["recall_heldout"], r["recall_heldout_by_ids"] = recall(X, Q, I, *ex)
        _, I = index.search(Qm, K); r["recall_midpoint"], _ = recall(X, Qm, I, *exm)
        r["ms_1t"] = latency(index, Q, s, 1)
        r["ms_2t"] = latency(index, Q, s, 2)
        if pmode_check and faiss.try_extract_index_ivf(index) is not None: r["ms_2t_parallel_mode_1"] = latency(index, Q, s, 2, pmode=1)
        row["settings"][s] = r
        print(f"  {tag} {name} {s}: {json.dumps(r)}", file=sys.stderr, flush=True)
        if r["recall_heldout"] >= 0.995 or r["ms_1t"]["p50"] > 60: break   # no point searching wider
    row["loadavg_1min"] = [round(la0, 2), round(os.getloadavg()[0], 2)]
    if load:
        path = WORK / f"idx_{tag}_{name}.faiss"
        set_params(index, sweep[0])   # read_index refuses a stored IndexRefine k_factor of 1024 or more; the load job sets its own
        faiss.write_index(index, str(path)); row["file_mb"] = round(path.stat().st_size / 2**20, 1)
        del index; gc.collect()
        best = _best(row) or list(row["settings"])[-1]
        qfile = WORK / f"Q_{tag}.npy"
        row["load"] = {}
        for flag in ("plain", "mmap", "mmap_ifc"):
            p = subprocess.run([sys.executable, __file__, "--job", "load", "--index", str(path), "--setting", best,
                                "--flag", flag, "--qfile", str(qfile)], capture_output=True, text=True)
            row["load"][flag] = (json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 and p.stdout.strip()
                                 else {"error": p.stderr[-300:]})
        row["load"]["setting"] = best
        path.unlink()
    else: del index
    gc.collect()
    return row


def _best(row:dict):
    "The first setting reaching TARGET recall on the held-out queries, else None."
    return next((s for s, r in row["settings"].items() if r["recall_heldout"] >= TARGET), None)


def promising(row:dict)->bool:
    "Reaches TARGET at the first size with a single-query p50 (1 thread) within the dense budget."
    s = _best(row)
    return s is not None and row["settings"][s]["ms_1t"]["p50"] <= DENSE_P50_BUDGET_MS


def run_size(tag:str, X, Q, names:list, info:dict, results:dict, out_path:Path)->dict:
    import numpy as np
    np.save(WORK / f"Q_{tag}.npy", Q)
    Qm = midpoints(X)
    t = time.perf_counter(); ex = exact_top(X, Q); exm = exact_top(X, Qm); ex_s = time.perf_counter() - t
    import faiss
    prev = results["sizes"].get(tag, {})
    size = {"vectors": int(len(X)), "dim": int(X.shape[1]), "queries": int(len(Q)), "data": info,
            "exact_top10_s_both_query_sets": round(ex_s, 1),
            "query_contrast": prev.get("query_contrast") or {"heldout": contrast(X, Q), "midpoint": contrast(X, Qm)},
            "candidates": dict(prev.get("candidates", {}))}   # --merge: the candidates measured before stay
    specs = candidates(len(X))
    for name in names:
        print(f"[{tag}] {name} …", file=sys.stderr, flush=True)
        try: size["candidates"][name] = run_candidate(name, specs[name], X, Q, Qm, ex, exm, tag)
        except Exception as e: size["candidates"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        results["sizes"][tag] = size
        out_path.write_text(json.dumps(results, indent=1) + "\n")   # partial results survive an interruption
    size["peak_rss_mb_this_run"] = round(status("VmHWM"))
    return size


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    ap.add_argument("--candidates", nargs="+", help="names to run at every size (default: all at the first size, then the promising ones)")
    ap.add_argument("--large", nargs="+", help="names to run at sizes after the first (overrides the promising rule)")
    ap.add_argument("--no-real", action="store_true", help="skip the real all-MiniLM-L6-v2 vectors")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--merge", action="store_true", help="keep the other sizes already in --out (re-run some sizes only)")
    ap.add_argument("--job", choices=["load"]); ap.add_argument("--index"); ap.add_argument("--setting")
    ap.add_argument("--flag"); ap.add_argument("--qfile")
    a = ap.parse_args()
    if a.job: print(json.dumps(load_job(a.index, a.setting, a.flag, a.qfile))); return
    import faiss, numpy as np
    from scale import SHARED
    WORK.mkdir(parents=True, exist_ok=True)
    out_path = Path(a.out)
    res = {"bench": "ann_scale", "target_recall_at_10": TARGET, "dense_p50_budget_ms": DENSE_P50_BUDGET_MS,
           "vectors": "bench/scale.py stand-in: real text of cisi, cacm, pt_faquad, zh_cmrc2018_dev, 80-word chunks, "
                      "signed CRC-32 feature hashing into 384 dims, unit rows; queries: its 200 held-out query strings",
           "recall": "a returned row counts when its exact cosine reaches the exact 10th (ties count); by_ids: id overlap",
           "latency": "one query per search call, p50/p95 ms over the queries, after 5 warm-up queries",
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "faiss": faiss.__version__,
                       "numpy": np.__version__, "nice": os.nice(0)}, "sizes": {}}
    if a.merge and out_path.exists():
        old = json.loads(out_path.read_text())
        res["sizes"], res["selection"] = old.get("sizes", {}), old.get("selection", {})
        if "real_minilm" in old: res["real_minilm"] = old["real_minilm"]
    if not a.no_real:
        X, Q, info = real_vectors()
        if X is None: res["real_minilm"] = info
        else:
            names = a.candidates or list(candidates(len(X)))
            res["sizes"]["real_minilm"] = run_size("real_minilm", X, Q, names, info, res, out_path)
    first = None
    for n in a.sizes:
        if not SHARED.exists(): res["sizes"][str(n)] = {"skipped": f"{SHARED} not found"}; continue
        t = time.perf_counter(); X, Q, info = stand_in_vectors(n); info["load_or_make_s"] = round(time.perf_counter() - t, 1)
        if a.merge and a.large: names = a.large
        elif first is None or a.candidates and not a.large:
            names = a.candidates or list(candidates(n))
        else:
            names = a.large or ["hnsw32", "exact_flat"] + [c for c, r in first["candidates"].items()
                                                            if c not in ("hnsw32", "exact_flat") and "settings" in r and promising(r)]
        res.setdefault("selection", {})[str(n)] = names
        size = run_size(str(n), X, Q, names, info, res, out_path)
        first = first or size
        del X; gc.collect()
    s = json.dumps(res, indent=1)
    out_path.write_text(s + "\n")
    print(s)


if __name__ == "__main__":
    main()
