"""Answer confidence against real qrels: `local_knowledge_trainer.confidence` on one BEIR folder, beside the raw top-1 cosine.

Prints ONE JSON object on stdout (progress on stderr). The base is the whole collection, one unit per document
(`beir.BeirIndex`), embedded with the model the collection's language chooses (`embeddings.model_for_language`:
all-MiniLM-L6-v2 for English, multilingual-e5-small for Portuguese and Chinese; embeddings cached under
~/.cache/lkt/beir). The models are fitted without labels (`fit_confidence_models`). For a seeded subset of the judged
queries (--max-queries), k = --k:
  - answerable: hit@k of the fused top-k; AUROC for hit@k of the confidence and of the raw top-1 cosine (the baseline,
    `query_features` with the dense channel alone), ECE (10 bins), Brier, abstention on hits and misses;
  - unanswerable, on topic: the same queries with their qrels-relevant documents removed; AUROC of answerable hits
    against them (confidence and raw cosine), share with p < 0.05 (the p-value's false-positive rate), abstention;
  - mixed: ECE over answerable + unanswerable (the 50/50 population the label-free prior assumes);
  - off topic: judged queries of the other shared collections (seeded): abstention;
  - labelled: 10 seeded splits (with ≥ 3 hits and 3 misses among the labels); 50 answerable queries (fewer where the
    collection is small: all but max(10, n/5)) become the user's labels (`set_labels`), the others are scored; their
    predictions are pooled: ECE of the calibrated confidence, and coverage of its 95 % CI (share of held-out queries whose
    interval holds the pooled held-out hit rate of their fifth by confidence: "questions at similar confidence");
  - cost: seconds of the label-free fit, and milliseconds of one confidence (features + calibration) for k in 1..50.

  .venv/bin/python bench/confidence.py ../shared/data/cisi [--max-queries 300] [--k 5]
"""
import argparse, json, math, os, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
DATASETS = ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")
LANG = {"cisi": "en", "cacm": "en", "pt_faquad": "pt", "zh_cmrc2018_dev": "zh"}


def log(*a): print(*a, file=sys.stderr, flush=True)


def r4(x):
    if isinstance(x, dict): return {k: r4(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)): return [r4(v) for v in x]
    if isinstance(x, float): return None if not math.isfinite(x) else round(x, 4)
    return x


def interval_delta(c:dict, s:float, level:float=0.95)->tuple:
    "Candidate CI 1: the delta method on Platt's two parameters (the labelled calibration's covariance)."
    import numpy as np
    from scipy import stats
    f, z = c["label_fit"], stats.norm.ppf(0.5 + level / 2)
    x = np.array([1.0, s]); eta, se = f["a"] + f["b"] * s, math.sqrt(max(float(x @ f["cov"] @ x), 0.0))
    return 1 / (1 + math.exp(-(eta - z * se))), 1 / (1 + math.exp(-(eta + z * se)))


def interval_nearest(c:dict, s:float, level:float=0.95)->tuple:
    "Candidate CI 2: Jeffreys interval of the hit rate of the max(10, n/3) labelled questions nearest in score."
    import numpy as np
    from scipy import stats
    rs, ry = c["rows"]; m = max(10, math.ceil(len(rs) / 3)); near = np.argsort(np.abs(rs - s), kind="stable")[:m]
    h, n, a = int(ry[near].sum()), len(near), (1 - level) / 2
    return (0.0 if h == 0 else float(stats.beta.ppf(a, h + .5, n - h + .5)), 1.0 if h == n else float(stats.beta.ppf(1 - a, h + .5, n - h + .5)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path"); ap.add_argument("--max-queries", type=int, default=300); ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--off", type=int, default=100, help="off-topic queries from the other collections")
    ap.add_argument("--labelled", type=int, default=50, help="labelled questions per split")
    a = ap.parse_args()
    import numpy as np, pandas as pd
    from scipy import stats
    from local_knowledge_trainer.beir import BeirIndex, load_beir
    from local_knowledge_trainer.embeddings import model_for_language
    from local_knowledge_trainer.probes import content_seed
    from local_knowledge_trainer.golden import KeyMatcher
    from local_knowledge_trainer import confidence as C
    t0, path = time.time(), Path(a.path); lang = LANG.get(path.name, "en"); model = model_for_language(lang)
    log(f"[{path.name}] indexing with {model}")
    bi = BeirIndex(path, embedder=model, max_queries=a.max_queries, seed=content_seed(path.name) % 2**31, progress=False)
    kb, snap = bi.kb, bi.kb.snapshot()
    t = time.time(); models = C.fit_confidence_models(kb); fit_s = time.time() - t
    log(f"[{path.name}] {len(kb)} documents, {len(bi.cases)} queries; fitted in {fit_s:.1f}s: {list(models.values())}")
    k, cases = a.k, bi.cases
    ans = C.measure_confidence(kb, cases, k=k)
    un = C.measure_confidence(kb, cases, k=k, drop_relevant=True)
    qs = list(ans["query"]); dense = "dense" in C.base_channel_sets(kb)[0] and "dense" in ans.channels.iloc[0]
    rel = {c.query: [i for i in snap.ids if KeyMatcher(list(c.relevant)).match(snap.chunks[i]) is not None] for c in cases}
    raw = C.query_features(kb, qs, ("dense",))[0][:, 0] if dense else None
    raw_un = C.query_features(kb, list(un["query"]), ("dense",), k, [rel[q] for q in un["query"]])[0][:, 0] if dense else None
    hit = ans.hit.to_numpy(int); hits = hit == 1; y_un = np.r_[np.ones(hits.sum()), np.zeros(len(un))]
    log(f"[{path.name}] answerable and unanswerable measured ({time.time() - t0:.0f}s)")
    out = {"collection": path.name, "language": lang, "model": model, "documents": len(kb), "queries": len(ans), "k": k,
           "channels": ans.channels.value_counts().to_dict(),
           "models": {"+".join(s): {"score": m.score, "probe_auroc": m.probe_auroc, "n_probes": m.n_probes, "null": len(m.absent)}
                      for s, m in models.items()},
           "fit_seconds": fit_s,
           "answerable": {"confidence": C.confidence_summary(ans.confidence, hit, ans.abstained),
                          "raw_top1_cosine": C.confidence_summary(raw, hit) if dense else None,
                          "reliability": C.reliability_table(ans.confidence, hit).to_dict("records"),
                          "p_below_0.05_hits": float((ans.p_value[hits] < 0.05).mean()) if hits.any() else None},
           "unanswerable": {"n": len(un), "mean_confidence": float(un.confidence.mean()),
                            "auroc_hits_vs_unanswerable": C._auroc(np.r_[ans.confidence[hits], un.confidence], y_un),
                            "auroc_hits_vs_unanswerable_raw_cosine": C._auroc(np.r_[raw[hits], raw_un], y_un) if dense else None,
                            "p_below_0.05": float((un.p_value < 0.05).mean()), "abstained": float(un.abstained.mean())},
           "mixed_ece": C._ece(np.r_[ans.confidence, un.confidence], np.r_[hit, np.zeros(len(un))])}
    others = []
    for name in DATASETS:
        p = path.parent / name
        if name == path.name or not (p / "queries.jsonl").exists(): continue
        _, oq, _ = load_beir(p); others += [(name, q) for q in oq.values()]
    if others:
        rng = np.random.default_rng(content_seed(*(q for _, q in others)))
        pick = [others[i] for i in sorted(rng.choice(len(others), min(a.off, len(others)), replace=False))]
        off = C.measure_confidence(kb, [{"id": str(j), "query": q, "relevant": {"__none__": 1}} for j, (_, q) in enumerate(pick)], k=k)
        out["off_topic"] = {"n": len(off), "from": {n: sum(1 for m, _ in pick if m == n) for n in DATASETS if any(m == n for m, _ in pick)},
                            "abstained": float(off.abstained.mean()), "mean_confidence": float(off.confidence.mean()),
                            "p_below_0.05": float((off.p_value < 0.05).mean())}
    log(f"[{path.name}] off-topic measured ({time.time() - t0:.0f}s)")
    # labelled: up to 50 answerable questions as the user's labels, the others scored; 10 seeded splits, predictions pooled
    lab = C.label_rows(kb, cases)
    by_q = {r["query"]: r for r in lab.to_dict("records")}
    ntr = min(a.labelled, len(ans) - max(10, len(ans) // 5))
    eces, pool = [], []
    for split in range(200):   # seeded splits until 10 whose labels hold at least 3 hits and 3 misses
        if len(eces) >= 10: break
        rng = np.random.default_rng(content_seed(path.name, "labelled", str(split)))
        order = rng.permutation(len(ans)); tr, te = order[:ntr], order[ntr:]
        if not 3 <= ans.hit.iloc[tr].sum() <= len(tr) - 3: continue   # fewer than 3 hits or misses among the labels: not calibrated
        C.set_labels(kb, [by_q[q] for q in ans["query"].iloc[tr]])
        held = C.measure_confidence(kb, [cases[[c.query for c in cases].index(q)] for q in ans["query"].iloc[te]], k=k)
        if (held.state != "labelled").any(): continue
        cal = {ch: C.calibration(C.confidence_model(kb, k, tuple(ch.split("+"))), k) for ch in set(held.channels)}
        held["ci_delta"] = [interval_delta(cal[ch], s) for ch, s in zip(held.channels, held.score)]
        held["ci_jeffreys"] = [interval_nearest(cal[ch], s) for ch, s in zip(held.channels, held.score)]
        eces.append(C._ece(held.confidence, held.hit)); pool.append(held)
    C.set_labels(kb, [])
    out["labelled"] = {"labels": ntr, "splits": len(eces), "ece_per_split": eces, "ece_per_split_mean": float(np.mean(eces)) if eces else None}
    if pool:
        P = pd.concat(pool, ignore_index=True)
        b = np.minimum((stats.rankdata(P.confidence, "ordinal") - 1) * 5 // len(P), 4)   # 5 equal-count bins of confidence
        rate = np.array([P.hit[b == j].mean() for j in range(5)])[b]                    # each question's bin's held-out hit rate
        cover = lambda col: float(np.mean([lo - 1e-12 <= r <= hi + 1e-12 for (lo, hi), r in zip(P[col], rate)]))
        width = lambda col: float(np.mean([hi - lo for lo, hi in P[col]]))
        out["labelled"] |= {"held_out_pooled": len(P), "ece_pooled": C._ece(P.confidence, P.hit),
                            "reliability": C.reliability_table(P.confidence, P.hit).to_dict("records"),
                            "candidate_ci95": {"delta_method_platt": {"coverage": cover("ci_delta"), "mean_width": width("ci_delta")},
                                              "jeffreys_nearest_labels": {"coverage": cover("ci_jeffreys"), "mean_width": width("ci_jeffreys")},
                                              "note": "neither covers 95 % everywhere, so the product reports no CI (nan)"}}
    # cost of one confidence for k in 1..50, models fitted (what a reader pays)
    ms = []
    for j, q in enumerate(qs[:40]):
        kk = 1 + j % 50; ch = C.answer_channels(kb, q)
        t = time.perf_counter(); F, _ = C.query_features(kb, [q], ch, kk); C.predict(C.confidence_model(kb, kk, ch), F, kk)
        ms.append((time.perf_counter() - t) * 1000)
    out["confidence_ms"] = {"p50": float(np.median(ms)), "p95": float(np.quantile(ms, 0.95)), "n": len(ms), "k": "1..40"}
    out["seconds"] = time.time() - t0
    log(f"[{path.name}] done ({out['seconds']:.0f}s)")
    print(json.dumps(r4(out)))


if __name__ == "__main__":
    main()
