"""Do held-out probes pick the same fusion setting as labelled qrels?

Prints ONE JSON object on stdout (progress goes to stderr). For each BEIR-layout collection (cisi, cacm, pt_faquad,
zh_cmrc2018_dev in <repo>/../shared/data; absent ones are skipped) the collection is indexed once with
`local_knowledge_trainer.beir.BeirIndex` (one unit per document, title + text; embeddings cached under ~/.cache/lkt/beir),
and a grid of fusion settings is scored two ways on the same `KnowledgeBase.rank` code path:

* label-free: held-out probe MRR@10 — `probes.draw_probes(chunks, n, per_doc=1)` takes one sentence out of each of up to
  n documents, `probes.probe_ranks(kb, probes, k=10, mode=...)` ranks the base with that sentence held out; the answer is
  the source document (a BEIR document is one chunk, so holding out a sentence leaves the rest of that document;
  documents with fewer than two sentences of >= 6 words give no probe);
* labelled: qrels nDCG@10 and MRR@10 over the judged queries (`golden.ranking_metrics`).

Settings: sparse only, dense only, and hybrid with dense RRF weight w in {0.25, 0.5, 1, 2} (sparse weight 1). For each
collection it reports both rankings of the settings, Kendall's tau between the probe and the qrels scores, whether the
argmax agrees, and the qrels nDCG@10 lost by taking the probes' choice instead of the qrels' best. With the product's
default `dense_languages="model"` the MiniLM dense channel takes no part in hybrid for non-English queries, so on
pt_faquad and zh_cmrc2018_dev every hybrid setting equals sparse; `--dense-languages all` lets dense in everywhere.

  .venv/bin/python bench/agreement.py [--datasets cisi cacm] [--max-queries 200] [--n-probes 200] [--dense-languages all]
"""
import argparse, json, os, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
DATASETS = ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")
DENSE_WEIGHTS = (0.25, 0.5, 1.0, 2.0)
K = 10

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(*a): print(*a, file=sys.stderr, flush=True)


def settings():
    "(name, mode, dense weight or None) of every fusion setting tried."
    return [("sparse", "sparse", None), ("dense", "dense", None)] + [(f"hybrid w_dense={w:g}", "hybrid", w) for w in DENSE_WEIGHTS]


def qrels_scores(idx, mode, k=K):
    "Mean nDCG@k and MRR@k over the judged queries, ranked by `kb.rank` (the probes' code path)."
    import numpy as np
    from local_knowledge_trainer.golden import ranking_metrics
    cases = idx.cases
    Q = idx.kb.embed_texts([c.query for c in cases]) if mode != "sparse" else None
    ranked = idx.kb.rank([c.query for c in cases], k, Q=Q, mode=mode)
    m = [ranking_metrics(r, c.relevant, k=k) for r, c in zip(ranked, cases)]
    return float(np.mean([x[f"ndcg@{k}"] for x in m])), float(np.mean([x[f"mrr@{k}"] for x in m]))


def order(scores:dict)->list:
    "Setting names, best first (ties in the order tried)."
    return [n for n, _ in sorted(scores.items(), key=lambda kv: -kv[1])]


def one(name, n_probes, max_queries, dense_languages):
    import numpy as np
    from scipy import stats
    from local_knowledge_trainer.beir import BeirIndex
    from local_knowledge_trainer.probes import draw_probes, probe_ranks, rr_at
    t0 = time.perf_counter()
    kw = {} if dense_languages == "model" else {"dense_languages": None}
    idx = BeirIndex(SHARED / name, max_queries=max_queries, progress=True, **kw)
    kb = idx.kb
    chunks = list(kb.store.iter_chunks())
    probes = draw_probes(chunks, n_probes, per_doc=1)
    log(f"{name}: {len(chunks)} docs, {len(idx.cases)} judged queries, {len(probes)} probes ({time.perf_counter()-t0:.0f}s)")
    dense_q = float(np.mean([kb.dense_used(c.query, "hybrid") for c in idx.cases]))
    dense_p = float(np.mean([kb.dense_used(p.query, "hybrid") for p in probes])) if probes else None
    base_w = dict(kb.weights)
    rows = {}
    for sname, mode, w in settings():
        if w is not None: kb.configure(weights={"dense": w, "sparse": 1.0})
        rr = rr_at(probe_ranks(kb, probes, k=K, mode=mode))
        nd, mrr = qrels_scores(idx, mode)
        rows[sname] = {"probe_mrr@10": round(float(rr.mean()), 4) if rr.size else None,
                       "probe_hit@10": round(float((rr > 0).mean()), 4) if rr.size else None,
                       "qrels_ndcg@10": round(nd, 4), "qrels_mrr@10": round(mrr, 4)}
        log(f"  {sname:20s} probe MRR@10 {rows[sname]['probe_mrr@10']}  qrels nDCG@10 {nd:.4f}  MRR@10 {mrr:.4f}")
    kb.configure(weights=base_w)
    pr = {s: r["probe_mrr@10"] for s, r in rows.items()}
    qn = {s: r["qrels_ndcg@10"] for s, r in rows.items()}
    qm = {s: r["qrels_mrr@10"] for s, r in rows.items()}
    names = list(rows)
    tau_n = stats.kendalltau([pr[s] for s in names], [qn[s] for s in names])
    tau_m = stats.kendalltau([pr[s] for s in names], [qm[s] for s in names])
    best_p, best_q = order(pr)[0], order(qn)[0]
    return {"documents": len(chunks), "judged_queries": len(idx.cases), "probes": len(probes),
            "dense_in_hybrid_share": {"queries": round(dense_q, 3), "probes": None if dense_p is None else round(dense_p, 3)},
            "settings": rows,
            "ranking_by_probes": order(pr), "ranking_by_qrels_ndcg@10": order(qn), "ranking_by_qrels_mrr@10": order(qm),
            "kendall_tau_probe_vs_ndcg@10": {"tau": round(float(tau_n.statistic), 4), "p": round(float(tau_n.pvalue), 4)},
            "kendall_tau_probe_vs_mrr@10": {"tau": round(float(tau_m.statistic), 4), "p": round(float(tau_m.pvalue), 4)},
            "argmax_probes": best_p, "argmax_qrels_ndcg@10": best_q, "argmax_agrees": best_p == best_q,
            "argmax_agrees_mrr@10": best_p == order(qm)[0],
            "ndcg@10_lost_by_probe_choice": round(qn[best_q] - qn[best_p], 4),
            "elapsed_s": round(time.perf_counter() - t0, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS))
    ap.add_argument("--max-queries", type=int, default=None, help="seeded subset of judged queries (default: all)")
    ap.add_argument("--n-probes", type=int, default=200)
    ap.add_argument("--dense-languages", choices=("model", "all"), default="model",
                    help="model: the product's default routing (dense only for languages the model covers); all: dense for every query")
    a = ap.parse_args()
    out = {"benchmark": "agreement of held-out probes with qrels on the choice of fusion setting", "k": K,
           "n_probes": a.n_probes, "max_queries": a.max_queries, "dense_languages": a.dense_languages,
           "settings": [s for s, *_ in settings()], "collections": {}}
    for name in a.datasets:
        if not (SHARED / name / "corpus.jsonl").is_file(): log(f"{name}: not found under {SHARED}, skipped"); continue
        out["collections"][name] = one(name, a.n_probes, a.max_queries, a.dense_languages)
    c = out["collections"]
    out["summary"] = {"argmax_agrees": {n: r["argmax_agrees"] for n, r in c.items()},
                      "kendall_tau_ndcg@10": {n: r["kendall_tau_probe_vs_ndcg@10"]["tau"] for n, r in c.items()},
                      "ndcg@10_lost": {n: r["ndcg@10_lost_by_probe_choice"] for n, r in c.items()}}
    print(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
