"""Answer confidence against real qrels: the calibrated P(hit@k) of `local_knowledge_trainer.confidence` on one BEIR folder.

Prints ONE JSON object on stdout (progress on stderr). The base is `beir.BeirIndex(PATH).kb` (one unit per document,
the whole collection, embeddings cached under ~/.cache/lkt/beir); the model is fitted label-free on the base's held-out
probes (`confidence.confidence_model`). Reported for the judged queries (all, or a seeded subset of --max-queries):
  - answerable: AUROC of confidence for hit@k (bootstrap CI seeded by content), ECE (10 bins) with the reliability
    table, Brier vs the base-rate Brier, hit rate above/below the abstention threshold; the same for `z_global_score`'s
    1 − p (the design's formula, uncalibrated) and for the confidence after a 2-fold labelled recalibration (Platt on
    one half of the queries, scored on the other, halves split by content);
  - on-topic unanswerable: the same queries with their qrels-relevant documents removed from the base
    (`measure_confidence(drop_relevant=True)`): mean confidence, abstention rate, share with p < 0.05;
  - off-topic: up to 100 judged queries of the other shared collections (seeded): mean confidence, abstention rate.

  .venv/bin/python bench/confidence.py PATH [--max-queries N] [--k 5] [--seed 0]
"""
import argparse, json, os, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
DATASETS = ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")


def log(*a): print(*a, file=sys.stderr, flush=True)


def r4(x):
    if isinstance(x, dict): return {k: r4(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)): return [r4(v) for v in x]
    if isinstance(x, float): return round(x, 4)
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path"); ap.add_argument("--max-queries", type=int, default=None); ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="seed of the query subset (BeirIndex)")
    a = ap.parse_args()
    import numpy as np
    from local_knowledge_trainer.beir import BeirIndex, load_beir
    from local_knowledge_trainer.probes import content_seed
    from local_knowledge_trainer import confidence as C
    t0 = time.time(); path = Path(a.path)
    log(f"[{path.name}] indexing"); bi = BeirIndex(path, max_queries=a.max_queries, seed=a.seed, progress=False); kb = bi.kb
    log(f"[{path.name}] {len(kb)} documents, {len(bi.cases)} queries ({time.time() - t0:.0f}s)")
    fits = {}
    for ch in sorted({C.answer_channels(kb, c.query) for c in bi.cases}):
        t = time.time(); m = C.confidence_model(kb, a.k, ch)
        fits["+".join(ch)] = {"method": m.method, "n_probes": m.n_probes, "probe_hit_rate": m.probe_hit_rate, "probe_oof_auroc": m.probe_oof_auroc,
                              "features": m.features, "coef_standardised": list(map(float, m.coef)), "platt": list(m.platt), "seconds": time.time() - t}
        log(f"[{path.name}] model {ch}: {m!r} ({time.time() - t:.1f}s)")
    df = C.measure_confidence(kb, bi.cases, k=a.k)
    log(f"[{path.name}] answerable measured ({time.time() - t0:.0f}s)")
    out = {"collection": path.name, "documents": len(kb), "queries": len(df), "k": a.k, "threshold": C.ABSTAIN_BELOW,
           "channels": df.channels.value_counts().to_dict(), "models": fits,
           "answerable": {"confidence": C.confidence_summary(df.confidence, df.hit),
                          "reliability_confidence": C.reliability_table(df.confidence, df.hit).to_dict("records"),
                          "z_global_uncalibrated": C.confidence_summary(df.z_global, df.hit),
                          "reliability_z_global": C.reliability_table(df.z_global, df.hit).to_dict("records"),
                          "p_value_below_0.05": float((df.p_value < 0.05).mean())}}
    # labelled recalibration, 2-fold by content: Platt on one half, scored on the other
    fold = np.array([content_seed(q) % 2 for q in df["query"]]); rec = np.full(len(df), np.nan)
    for f in (0, 1):
        for ch in df.channels.unique():
            tr, te = (fold != f) & (df.channels == ch).to_numpy(), (fold == f) & (df.channels == ch).to_numpy()
            y = df.hit.to_numpy(int)[tr]
            if te.any() and tr.sum() >= 10 and 0 < y.sum() < len(y):
                ab = C._platt(df.eta.to_numpy()[tr], y); rec[te] = C._sigmoid(ab[0] + ab[1] * df.eta.to_numpy()[te])
    ok = np.isfinite(rec)
    out["answerable"]["confidence_labelled_2fold"] = C.confidence_summary(rec[ok], df.hit.to_numpy()[ok]) if ok.any() else None
    un = C.measure_confidence(kb, bi.cases, k=a.k, drop_relevant=True)
    out["on_topic_unanswerable"] = {"how": "each judged query with its qrels-relevant documents removed from the base", "n": len(un),
                                    "mean_confidence": float(un.confidence.mean()), "abstention_rate": float((un.confidence < C.ABSTAIN_BELOW).mean()),
                                    "p_value_below_0.05": float((un.p_value < 0.05).mean()), "mean_z_global": float(un.z_global.mean()),
                                    "auroc_answerable_hits_vs_unanswerable": C._auroc(np.r_[df.confidence[df.hit == 1], un.confidence],
                                                                                       np.r_[np.ones(int((df.hit == 1).sum())), np.zeros(len(un))])}
    log(f"[{path.name}] on-topic unanswerable measured ({time.time() - t0:.0f}s)")
    others = []
    for name in DATASETS:
        p = path.parent / name
        if name == path.name or not (p / "queries.jsonl").exists(): continue
        _, qs, _ = load_beir(p); others += [(name, q) for q in qs.values()]
    if others:
        rng = np.random.default_rng(content_seed(*(q for _, q in others)))
        pick = [others[i] for i in sorted(rng.choice(len(others), min(100, len(others)), replace=False))]
        off = C.measure_confidence(kb, [{"id": str(j), "query": q, "relevant": {"__none__": 1}} for j, (_, q) in enumerate(pick)], k=a.k)
        out["off_topic"] = {"how": "judged queries of the other shared collections, seeded sample", "n": len(off),
                            "from": {n: sum(1 for m, _ in pick if m == n) for n in DATASETS if any(m == n for m, _ in pick)},
                            "mean_confidence": float(off.confidence.mean()), "abstention_rate": float((off.confidence < C.ABSTAIN_BELOW).mean()),
                            "p_value_below_0.05": float((off.p_value < 0.05).mean()), "mean_z_global": float(off.z_global.mean())}
    out["seconds"] = time.time() - t0
    log(f"[{path.name}] done ({out['seconds']:.0f}s)")
    print(json.dumps(r4(out)))


if __name__ == "__main__":
    main()
