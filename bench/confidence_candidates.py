"""Which answer-confidence predictor separates answerable from unanswerable questions: candidates side by side on one BEIR folder.

Prints ONE JSON object on stdout (progress on stderr): per candidate predictor, three AUROCs. With --out it also saves
the per-query score lists it measured (a pickle, for re-analysis; --from reads one instead of measuring again).

The base is the whole collection, one unit per document, embedded with the model `language` chooses
(`embeddings.model_for_language`: all-MiniLM-L6-v2 for English, multilingual-e5-small for pt/zh), so the channels are
the ones a user of that language gets. Each judged query (all, or a seeded subset of --max-queries) is asked three ways:
  - answerable: against the whole base; hit@k of the fused top-k against qrels;
  - unanswerable, on topic: the same query with its qrels-relevant documents removed (BM25 statistics recomputed);
  - off topic: judged queries of the other shared collections (seeded sample).
For each, the dense and BM25 score lists are kept, and every candidate predictor is computed from them. Reported per
candidate: AUROC answerable-hits vs the same questions made unanswerable, AUROC for hit@k on the answerable questions,
and AUROC answerable-hits vs off-topic.

Candidates (d: the dense top-100 cosines, b: the BM25 top-100 scores, over the base or its unanswerable variant):
cos1 = d1 (the baseline); cos_gap = d1 − d2; cos_m10 = d1 − mean(d2..d10); cos_m50 = d1 − mean(d11..d50);
cos_z = (d1 − mean over the base)/SD over the base; cos_zt = (d1 − mean(d2..d100))/SD(d2..d100); cos_pct = percentile of
d1 among the base's own nearest-other-document cosines (300 seeded chunks); wig_d = mean(d1..d5) − base mean (WIG,
Zhou & Croft 2007, on cosines); nqc_d = SD(d1..d5)/|base mean| (NQC, Shtok et al. 2012, on cosines); bm1 = b1;
bm1n = b1 / attainable BM25; bm_gap = (b1 − b2)/b1; bm_m10 = (b1 − mean b2..b10)/b1; wig_b = mean(b1..b5)/sqrt(|q|);
nqc_b = SD(b1..b5)/mean(b1..b100); bm_z = (b1 − mean b2..b100)/SD; scq = mean idf of the query's terms (pre-retrieval);
overlap5 = |dense top 5 ∩ BM25 top 5| / 5.

  .venv/bin/python bench/confidence_candidates.py ../shared/data/cisi [--max-queries 300] [--k 5] [--out F.pkl | --from F.pkl]
"""
import argparse, json, math, os, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from confidence import DATASETS, LANG, log   # bench/confidence.py: the collections, their languages, the repo on sys.path
TOP = 100   # score-list depth kept per query and channel


def lists(kb, snap, Q, qs, drops, k):
    "Per query: dense top-TOP cosines and ids, BM25 top-TOP scores and ids, attainable BM25, idfs, fused top-k ids."
    import numpy as np
    from local_knowledge_trainer.lexical import top_positions
    from local_knowledge_trainer.retrieval import rrf_fuse
    from local_knowledge_trainer.confidence import _bm25_max
    out, v0 = [], kb._variant(snap, None, None)
    for j, q in enumerate(qs):
        v = v0 if not drops or not drops[j] else kb._variant(snap, drops[j], None)
        ids = v["ids"]; toks = list(kb.lexical.tokenizer(q))
        r = {"n": v["n"], "toks": toks}
        rk = {}
        if Q is not None:
            sd = (snap.X @ Q[j])[v["keep"]]
            p = top_positions(sd, TOP, positive=False)
            r["d"], r["d_ids"] = sd[p].astype(float), [ids[i] for i in p]
            r["d_mean"], r["d_sd"] = float(sd.mean()), float(sd.std())
            rk["dense"] = [(ids[i], float(sd[i])) for i in p[:kb.candidates]]
        sb = kb._bm25_scores(v, toks)
        p = top_positions(sb, TOP, positive=True)
        r["b"], r["b_ids"], r["bmax"] = sb[p].astype(float), [ids[i] for i in p], _bm25_max(kb, v, toks)
        r["idf"] = [float(v["idf"][v["vocab"][t]]) if t in v["vocab"] else None for t in toks]
        rk["sparse"] = [(ids[i], float(sb[i])) for i in p[:kb.candidates]]
        rk = {c: l for c, l in rk.items() if l}
        if len(rk) == 2: top = [i for i, *_ in rrf_fuse(rk, kb.weights, rrf_k=kb.rrf_k, top_k=k)]
        else: top = [i for i, _ in next(iter(rk.values()))][:k] if rk else []
        r["top"] = top
        out.append(r)
    return out


def feats(r, nn0=None, K=5):
    "Every candidate predictor of one query's score lists."
    import numpy as np
    f, d = {}, r.get("d")
    if d is not None and len(d):
        d = np.asarray(d); f["cos1"] = d[0]; f["cos_gap"] = d[0] - d[1]; f["cos_m10"] = d[0] - d[1:10].mean()
        f["cos_m50"] = d[0] - d[10:50].mean(); f["cos_z"] = (d[0] - r["d_mean"]) / r["d_sd"]
        f["cos_zt"] = (d[0] - d[1:100].mean()) / (d[1:100].std() + 1e-9)
        f["wig_d"] = d[:K].mean() - r["d_mean"]; f["nqc_d"] = d[:K].std() / abs(r["d_mean"] + 1e-9)
        if nn0 is not None and len(nn0): f["cos_pct"] = np.searchsorted(np.sort(nn0), d[0]) / len(nn0)
    b = np.zeros(100); b[:len(r["b"])] = r["b"]; b1 = b[0]
    f["bm1"] = b1; f["bm1n"] = b1 / r["bmax"] if r["bmax"] > 0 else 0.0
    f["bm_gap"] = (b1 - b[1]) / b1 if b1 > 0 else 0.0; f["bm_m10"] = (b1 - b[1:10].mean()) / b1 if b1 > 0 else 0.0
    f["wig_b"] = b[:K].mean() / np.sqrt(max(1, len(r["toks"]))); f["nqc_b"] = b[:K].std() / (b[:100].mean() + 1e-9)
    f["bm_z"] = (b1 - b[1:100].mean()) / (b[1:100].std() + 1e-9) if b1 > 0 else 0.0
    idf = [x for x in r["idf"] if x is not None]; f["scq"] = float(np.mean(idf)) if idf else 0.0
    if r.get("d_ids"): f["overlap5"] = len(set(r["d_ids"][:5]) & set(r["b_ids"][:5])) / 5
    return {k: float(v) for k, v in f.items()}


def table(D)->dict:
    "candidate -> AUROC of answerable hits vs the same questions unanswerable, for hit@k, and hits vs off-topic."
    import numpy as np
    from local_knowledge_trainer.confidence import _auroc
    nn0 = D["nn"][:, 0] if len(D["nn"]) else None
    A, U, O = ([feats(r, nn0) for r in D[x]] for x in ("ans", "un", "off"))
    hit = np.array([r["hit"] for r in D["ans"]]); out = {}
    for k in A[0]:
        a, u = np.array([x[k] for x in A]), np.array([x[k] for x in U]); o = np.array([x.get(k, np.nan) for x in O])
        ah = a[hit == 1]
        out[k] = {"hits_vs_unanswerable": _auroc(np.r_[ah, u], np.r_[np.ones(len(ah)), np.zeros(len(u))]), "hit_at_k": _auroc(a, hit),
                  "hits_vs_off_topic": _auroc(np.r_[ah, o], np.r_[np.ones(len(ah)), np.zeros(len(o))]) if len(o) else None}
    return {"hit_rate": float(hit.mean()), "misses": int((hit == 0).sum()), "candidates": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path"); ap.add_argument("--max-queries", type=int, default=300); ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--off", type=int, default=100, help="off-topic queries")
    ap.add_argument("--out", default=None, help="pickle of the per-query lists (for re-analysis)")
    ap.add_argument("--from", dest="src", default=None, help="analyse a pickle written by --out instead of measuring")
    a = ap.parse_args()
    import numpy as np, pickle
    if a.src:
        with open(a.src, "rb") as f: D = pickle.load(f)
        print(json.dumps({**D["meta"], **table(D)})); return
    from local_knowledge_trainer.beir import BeirIndex, load_beir
    from local_knowledge_trainer.embeddings import model_for_language
    from local_knowledge_trainer.probes import content_seed
    t0 = time.time(); path = Path(a.path); lang = LANG.get(path.name, "en")
    model = model_for_language(lang)
    log(f"[{path.name}] indexing with {model}")
    bi = BeirIndex(path, embedder=model, max_queries=a.max_queries, seed=content_seed(path.name) % 2**31, progress=False)
    kb, snap = bi.kb, bi.kb.snapshot()
    log(f"[{path.name}] {len(kb)} documents, {len(bi.cases)} queries ({time.time() - t0:.0f}s)")
    qs = [c.query for c in bi.cases]; rel = [set(d for d, g in c.relevant.items() if g > 0) if isinstance(c.relevant, dict) else set(c.relevant) for c in bi.cases]
    dense = kb.dense_used(qs[0], "hybrid")
    Q = np.asarray(kb.embed_queries(qs), np.float32) if dense else None
    log(f"[{path.name}] dense={dense}, queries embedded ({time.time() - t0:.0f}s)")
    ans = lists(kb, snap, Q, qs, None, a.k)
    for r, R in zip(ans, rel): r["hit"] = int(any(i in R for i in r["top"]))
    un = lists(kb, snap, Q, qs, [sorted(R & set(snap.pos)) for R in rel], a.k)
    log(f"[{path.name}] answerable and unanswerable ({time.time() - t0:.0f}s)")
    others = []
    for name in DATASETS:
        p = path.parent / name
        if name == path.name or not (p / "queries.jsonl").exists(): continue
        _, oq, _ = load_beir(p); others += [(name, q) for q in oq.values()]
    rng = np.random.default_rng(content_seed(*(q for _, q in others)) if others else 0)
    pick = [others[i][1] for i in sorted(rng.choice(len(others), min(a.off, len(others)), replace=False))] if others else []
    Qo = np.asarray(kb.embed_queries(pick), np.float32) if dense and pick else None
    off = lists(kb, snap, Qo, pick, None, a.k)
    # the base's own distribution: each of 300 seeded chunks' nearest other-document cosine (a "question" that is a document)
    ids = snap.ids; sel = np.random.default_rng(content_seed(snap.key)).choice(len(ids), min(300, len(ids)), replace=False)
    nn = []
    if dense:
        S = snap.X[sel] @ snap.X.T
        S[np.arange(len(sel)), sel] = -2
        nn = np.sort(S, axis=1)[:, ::-1][:, :TOP].astype(float)
    res = {"collection": path.name, "language": lang, "model": model, "documents": len(kb), "queries": len(qs), "k": a.k,
           "dense": dense, "off_topic": len(pick), "seconds": time.time() - t0}
    D = {"meta": res, "ans": ans, "un": un, "off": off, "nn": nn}
    if a.out:
        with open(a.out, "wb") as f: pickle.dump(D, f)
    print(json.dumps({**res, **table(D)}))


if __name__ == "__main__":
    main()
