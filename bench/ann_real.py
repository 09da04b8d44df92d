"""Recall@10 against exact search of the vector store a 1M base builds, on real embeddings (issue 27); prints one JSON object.

texts    bench/scale.py's corpus of --n chunks (`make_corpus`: real sentences of the shared collections, content-seeded),
         cut by the library's chunker as the trainer cuts a .txt file (80 words, no overlap), in shards of 10,000 chunks.
vectors  all-MiniLM-L6-v2, the product's default English model (`SentenceTransformerBackend`), with max_seq_length=--window
         (default 32): the first 30 word pieces of each chunk. At the model's own 256 the 1M chunks would take about 13 h
         on this 2-core machine (22 chunks/s); at 32 about 1.6 h. The vectors are the real model's outputs on real text;
         what differs from a base of full chunks is the window: `window_check` gives the cosine between a chunk's 32-piece
         and 256-piece vectors, and how concentrated 1,000 chunks are at either window (mean cosine, neighbours).
         Shards are embedded by --workers processes of 1 thread each (`--speed` measures 1x2 against 2x1 threads first);
         each shard is written once (.npy, renamed into place), so a stopped run resumes where it was.
queries  scale.py's 200 held-out query strings (3-8 words of sentences never in the corpus), by the same model; and the
         midpoints of 200 pairs of stored vectors (what `FaissHNSWStore.calibrate` samples); and the 128 real questions
         of cisi and cacm (queries.jsonl: users' information needs, the English collections the corpus's sentences
         come from), the nearest stand-in for what a user asks.
index    the product's path: `AutoStore(384).add` in batches of 50,000 (exact up to EXACT_MAX, then `FaissHNSWStore`
         M=32, efConstruction=64, efSearch set by `calibrate` at each doubling: target 0.95, stop at a plateau).
recall   a returned row counts when its exact cosine reaches the exact 10th (ties count), as bench/scale.py counts, and by
         ids; a percentile bootstrap 95% CI over queries (2,000 resamples, seeded by the vectors). Then every efSearch of
         EF_STEPS, with the p50 of one query per search call.

    nice -n 5 .venv/bin/python bench/ann_real.py --out bench/measured/ann_real_1m.json     # texts, embed, measure
    .venv/bin/python bench/ann_real.py --phase measure --out ...                           # measure shards already embedded
Vectors live under $LKT_ANN_DIR/real_<n>_w<window> (default /tmp/lkt_ann), never in the repository.
"""
import argparse, hashlib, json, os, platform, subprocess, sys, time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "bench"))
WORK = Path(os.environ.get("LKT_ANN_DIR", "/tmp/lkt_ann"))
SHARD, MODEL, K = 10_000, "all-MiniLM-L6-v2", 10


def work(n:int, window:int)->Path: return WORK / f"real_{n}_w{window}"


def backend(window:int):
    "The packaged all-MiniLM-L6-v2 with its window cut to `window` word pieces."
    from local_knowledge_trainer.embeddings import resolve_backend
    b = resolve_backend(MODEL).load(); b._model.max_seq_length = window; b.batch_size = 256
    return b


def make_texts(n:int, window:int)->dict:
    "Write the corpus's chunks as shards of [id, text] (once)."
    from scale import make_corpus, CHUNK_WORDS
    from local_knowledge_trainer.chunking import make_unit, chunks_from_units
    d = work(n, window); (d / "texts").mkdir(parents=True, exist_ok=True)
    info_f = d / "texts.json"
    if info_f.exists(): return json.loads(info_f.read_text())
    t = time.perf_counter(); info = make_corpus(n, d / "corpus")
    buf, s, total = [], 0, 0
    def flush(final=False):
        nonlocal buf, s
        while len(buf) >= SHARD or (final and buf):
            (d / "texts" / f"{s:04d}.json").write_text(json.dumps(buf[:SHARD], ensure_ascii=False)); buf, s = buf[SHARD:], s + 1
    for f in sorted((d / "corpus").iterdir()):
        chunks, _ = chunks_from_units(f.name, [make_unit(f.read_text(encoding="utf-8"), section=None, lineno=1)], CHUNK_WORDS, 0, "text")
        buf += [[c.id, c.text] for c in chunks]; total += len(chunks); flush()
    flush(final=True)
    info.update(chunks=total, shards=s, texts_s=round(time.perf_counter() - t, 1))
    info_f.write_text(json.dumps(info)); return info


def embed(n:int, window:int, worker:int, workers:int):
    "Embed this worker's shards (s % workers == worker) on 1 thread; print one line per shard."
    import numpy as np
    d = work(n, window); (d / "vectors").mkdir(exist_ok=True)
    b = backend(window)
    for f in sorted((d / "texts").glob("*.json")):
        s = int(f.stem); out = d / "vectors" / f"{s:04d}.npy"
        if s % workers != worker or out.exists(): continue
        texts = [t for _, t in json.loads(f.read_text())]
        t = time.perf_counter(); X = b.encode_passages(texts, threads=1).astype(np.float32)
        tmp = out.with_suffix(".tmp.npy"); np.save(tmp, X); tmp.rename(out)
        print(json.dumps({"shard": s, "chunks": len(texts), "per_s": round(len(texts) / (time.perf_counter() - t), 1)}), flush=True)


def speed(window:int, n_texts:int=512)->dict:
    "Chunks/s of 1 process x 2 threads and of 1 thread (x2 processes on 2 cores), on the first shard's texts."
    import numpy as np
    d = next(WORK.glob(f"real_*_w{window}"))
    texts = [t for _, t in json.loads((d / "texts" / "0000.json").read_text())][:n_texts]
    b = backend(window); b.encode_passages(texts[:64], threads=1)
    out = {}
    for th in (1, 2, 1, 2):
        t = time.perf_counter(); b.encode_passages(texts, threads=th)
        out.setdefault(f"threads_{th}", []).append(round(len(texts) / (time.perf_counter() - t), 1))
    return {k: float(np.median(v)) for k, v in out.items()}


def window_check(n:int, window:int, n_texts:int=1000)->dict:
    "Cosine between a chunk's vector at `window` pieces and at the model's 256, on the first shard's first n_texts chunks."
    import numpy as np
    texts = [t for _, t in json.loads((work(n, window) / "texts" / "0000.json").read_text())][:n_texts]
    X = np.load(work(n, window) / "vectors" / "0000.npy")[:n_texts]
    b = backend(256); F = b.encode_passages(texts, threads=2)
    c = (X * F).sum(1)
    toks = b.count_tokens(texts)
    def spread(V):   # how concentrated the set is: mean cosine of two chunks, and each chunk's 1st and 10th neighbour in the set
        S = V @ V.T; np.fill_diagonal(S, -np.inf); top = -np.sort(-S, axis=1)
        return {"mean_pair_cosine": round(float(S[np.isfinite(S)].mean()), 4), "median_neighbour_1": round(float(np.median(top[:, 0])), 4),
                "median_neighbour_10": round(float(np.median(top[:, 9])), 4)}
    return {"chunks": n_texts, "cosine_window_vs_256": {"median": round(float(np.median(c)), 4), "p5": round(float(np.percentile(c, 5)), 4)},
            "median_word_pieces_per_chunk": float(np.median(toks)), "share_cut_by_256": round(float(np.mean(np.array(toks) > 256)), 4),
            "spread_in_these_chunks": {f"window_{window}": spread(X), "window_256": spread(F)}}


def bootstrap_ci(per_query, seed:int, n:int=2000)->list:
    import numpy as np
    rng = np.random.default_rng(seed); v = np.asarray(per_query)
    m = v[rng.integers(len(v), size=(n, len(v)))].mean(1)
    return [round(float(np.percentile(m, 2.5)), 4), round(float(np.percentile(m, 97.5)), 4)]


def measure(n:int, window:int, check:bool=True, exact_max:int=None)->dict:
    import gc, resource
    import numpy as np
    import faiss
    from ann_scale import exact_top, contrast, midpoints, normalise, status, real_vectors
    from local_knowledge_trainer.vector_store import AutoStore, EF_STEPS, EXACT_MAX
    d = work(n, window); info = json.loads((d / "texts.json").read_text())
    shards = sorted((d / "vectors").glob("[0-9][0-9][0-9][0-9].npy"))
    if len(shards) < info["shards"]: raise SystemExit(f"{d}/vectors: {len(shards)} of {info['shards']} shards embedded; run --phase embed")
    X = np.concatenate([np.load(f) for f in shards]); ids = [i for f in sorted((d / "texts").glob("*.json")) for i, _ in json.loads(f.read_text())]
    assert len(ids) == len(X)
    qs = json.loads((d / f"queries_{n}.json").read_text())
    b = backend(window); Q = normalise(b.encode_queries(qs, threads=2))
    from local_knowledge_trainer.beir import load_beir
    qb = [q for c in ("cisi", "cacm") for q in load_beir(ROOT.parent / "shared" / "data" / c)[1].values()]
    Qb = normalise(b.encode_queries(qb, threads=2))
    Qm = midpoints(X)
    seed = int(hashlib.sha256(X[:: max(1, len(X) // 1000)].tobytes()).hexdigest()[:16], 16)
    t = time.perf_counter(); ex = exact_top(X, Q); exm = exact_top(X, Qm); exb = exact_top(X, Qb); exact_s = time.perf_counter() - t
    res = {"bench": "ann_real", "n": n, "vectors": int(len(X)), "model": MODEL, "window_word_pieces": window,
           "texts": {k: info[k] for k in ("documents", "chunks", "seed") if k in info},
           "queries": {"heldout": len(Q), "midpoint": len(Qm), "beir_questions": len(Qb)}, "exact_top10_s": round(exact_s, 1),
           "contrast": {"heldout": contrast(X, Q), "midpoint": contrast(X, Qm), "beir_questions": contrast(X, Qb)}}
    Xr, Qr, rinfo = real_vectors()
    if Xr is not None: res["contrast_full_length_bench_cache"] = {"vectors": rinfo["vectors"], "model": rinfo["model"], **contrast(Xr, Qr)}
    del Xr, Qr
    faiss.omp_set_num_threads(2)
    st = AutoStore(384, exact_max=exact_max or EXACT_MAX); t = time.perf_counter()
    for s in range(0, len(ids), 50_000): st.add(ids[s:s + 50_000], X[s:s + 50_000])
    res["build_s"] = round(time.perf_counter() - t, 1); res["store"] = st.params()
    row_of = {i: r for r, i in enumerate(ids)}
    def rec(Qx, exx, ef):
        st.inner.ef_search = ef; st.inner.index.hnsw.efSearch = ef
        got = st.search(Qx, K)
        I = np.array([[row_of[i] for i, _ in g] + [-1] * (K - len(g)) for g in got])
        ok = I >= 0
        S = np.einsum("qkd,qd->qk", X[np.where(ok, I, 0)], Qx)
        by_score = ((S >= exx[0][:, -1:] - 1e-6) & ok).sum(1) / K
        by_ids = np.array([len(set(a.tolist()) & set(b_[b_ >= 0].tolist())) for a, b_ in zip(exx[1], I)]) / K
        ms = []
        for q in Qx[:200]:
            t0 = time.perf_counter(); st.search(q, K); ms.append((time.perf_counter() - t0) * 1000)
        return {"recall_at_10": round(float(by_score.mean()), 4), "ci95": bootstrap_ci(by_score, seed),
                "recall_at_10_by_ids": round(float(by_ids.mean()), 4), "p50_ms_one_query": round(float(np.percentile(ms, 50)), 3)}
    chosen = st.inner.ef_search
    res["at_calibrated_ef"] = {"ef_search": chosen, "heldout": rec(Q, ex, chosen), "midpoint": rec(Qm, exm, chosen),
                              "beir_questions": rec(Qb, exb, chosen)}
    res["sweep"] = {str(ef): {"heldout": rec(Q, ex, ef), "midpoint": rec(Qm, exm, ef), "beir_questions": rec(Qb, exb, ef)}
                    for ef in EF_STEPS}
    st.inner.ef_search = chosen; st.inner.index.hnsw.efSearch = chosen
    res["peak_rss_mb"] = round(status("VmHWM"))
    if check and (d / "vectors" / "0000.npy").exists():
        res["window_check"] = window_check(n, window)
    res["goal"] = {"recall_at_10": 0.95, "met": res["at_calibrated_ef"]["heldout"]["recall_at_10"] >= 0.95,
                   "met_on_beir_questions": res["at_calibrated_ef"]["beir_questions"]["recall_at_10"] >= 0.95}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000); ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--phase", choices=["all", "texts", "embed", "speed", "measure"], default="all")
    ap.add_argument("--workers", type=int, default=2); ap.add_argument("--worker", type=int)
    ap.add_argument("--out"); ap.add_argument("--no-window-check", action="store_true")
    ap.add_argument("--exact-max", type=int, help="AutoStore's exact_max (default the product's EXACT_MAX; smaller only to try the script)")
    a = ap.parse_args()
    if a.phase in ("all", "texts"): print(json.dumps(make_texts(a.n, a.window)), file=sys.stderr)
    if a.phase == "speed": print(json.dumps(speed(a.window))); return
    if a.phase == "embed" and a.worker is not None: embed(a.n, a.window, a.worker, a.workers); return
    if a.phase in ("all", "embed"):
        t = time.perf_counter()
        ps = [subprocess.Popen([sys.executable, __file__, "--phase", "embed", "--n", str(a.n), "--window", str(a.window),
                                "--workers", str(a.workers), "--worker", str(w)]) for w in range(a.workers)]
        if any(p.wait() for p in ps): raise SystemExit("an embedding worker failed")
        print(json.dumps({"embed_s": round(time.perf_counter() - t, 1)}), file=sys.stderr)
    if a.phase in ("all", "measure"):
        res = measure(a.n, a.window, check=not a.no_window_check, exact_max=a.exact_max)
        res["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "load": list(os.getloadavg())}
        s = json.dumps(res, indent=1)
        if a.out: Path(a.out).write_text(s + "\n")
        print(s)


if __name__ == "__main__": main()
