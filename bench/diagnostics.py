"""Base diagnostics on real data (20_diagnostics): garbage detection, duplicates, unretrievable documents, the
held-out-probe quality estimate with its CI and its coverage, chunk-size choice by probes vs labels, and the quality
tiers of answerable vs unanswerable questions.

Prints ONE JSON object on stdout (progress on stderr). Data: <repo>/../shared/data/cisi (BEIR layout; skipped when absent).

  .venv/bin/python bench/diagnostics.py [--coverage-reps 1000] [--opt-probes 200]
"""
import argparse, json, os, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1"); os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
def log(*a): print(*a, file=sys.stderr, flush=True)

def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--coverage-reps", type=int, default=1000); ap.add_argument("--opt-probes", type=int, default=200)
    a = ap.parse_args()
    import numpy as np, pandas as pd
    from scipy import stats
    from local_knowledge_trainer.beir import BeirIndex, load_beir
    from local_knowledge_trainer.index import KnowledgeBase
    from local_knowledge_trainer.probes import rr_at
    from local_knowledge_trainer import diagnostics as D
    from local_knowledge_trainer.text import text_quality
    from local_knowledge_trainer.bootstrap import cluster_bca
    out, t0 = {"collection": "cisi"}, time.time()
    cisi = DATA / "cisi"
    if not (cisi / "corpus.jsonl").is_file(): print(json.dumps({"skipped": "no cisi"})); return
    corpus, queries, qrels = load_beir(cisi)
    tq = pd.DataFrame([text_quality((d["title"] + "\n" + d["text"]).strip()) for d in corpus.values()])
    out["garbage_flagged_clean_abstracts"] = {"n": len(tq), "flagged": int(tq["garbage"].notna().sum()), "min_clean": float(tq["clean"].min())}
    idx = BeirIndex(cisi, progress=False); kb = idx.kb
    log("validate"); rep = D.validate_knowledge_base(kb, max_probes=2000)
    docs, dup = rep.details["documents"], rep.details["duplicates"]
    lab = D.bootstrap_confidence_interval(kb, queries=idx.cases)
    out["validate"] = {"is_valid": rep.is_valid, "warnings": rep.warnings, "duplicates_exact": int((dup.kind == "exact").sum()),
                       "duplicates_near": int((dup.kind == "near").sum()), "probed_documents": len(docs),
                       "unretrievable_documents": int(docs["unretrievable"].sum()), "probe_mrr5": rep.quality_score, "probe_mrr5_ci": rep.quality_ci,
                       "labelled_mrr5": lab["estimate"], "labelled_mrr5_ci": (lab["ci_lower"], lab["ci_upper"]), "labelled_n": lab["n_queries"],
                       "shapiro_W": rep.shapiro_stat, "shapiro_p": rep.shapiro_p, "ks_p": rep.ks_p, "outlier_count": rep.outlier_count}
    log("coverage"); pop = D._probe_table(kb, 10**6, per_doc=1, depth=5)
    rr, src = rr_at(pop["rank"].to_numpy()), pop["source"].to_numpy(); mu = rr.mean()
    cov = np.mean([(lambda lo, hi, _: lo <= mu <= hi)(*cluster_bca(rr[p], src[p], 2000, 0.95, r))
                   for r in range(a.coverage_reps) for p in [np.random.default_rng(r).choice(len(rr), 100, replace=False)]])
    out["ci_coverage"] = {"population_mrr5": float(mu), "population_probes": len(rr), "n_per_sample": 100, "reps": a.coverage_reps, "coverage_95": float(cov),
                          "binomial_99_band": [x / a.coverage_reps for x in stats.binom.interval(0.99, a.coverage_reps, 0.95)]}
    log("chunking"); ids = sorted(corpus, key=int); gdir = Path(tempfile.mkdtemp()) / "cisi_groups"; gdir.mkdir()
    group_of = {}
    for g in range(0, len(ids), 10):
        f = gdir / f"cisi_{g // 10:03d}.txt"
        f.write_text("\n\n".join((corpus[i]["title"] + "\n" + corpus[i]["text"]).strip() for i in ids[g:g + 10]), encoding="utf-8")
        for i in ids[g:g + 10]: group_of[i] = f.as_posix()
    gcases = [{"id": q, "query": queries[q], "relevant": {group_of[d]: 1 for d, s in qrels[q].items() if s > 0}} for q in qrels]
    opt = D.optimize_chunking(KnowledgeBase.from_chunks([], idx.embedder), strategies=(64, 128, 256), path=gdir, queries=gcases, n_queries=a.opt_probes)
    P, L = opt.details["probe_ranks"], opt.details["label_ranks"]
    out["chunking"] = {"design": "CISI abstracts concatenated in id order, 10 per document (146 documents); relevance at document level",
                       "best_size": opt.best_size, "recommendation": opt.recommendation, "cochran_p": opt.cochran_p, "chi2_independence_p": opt.p_value,
                       "pairwise": opt.pairwise, "ranking": opt.details["ranking"], "n_labelled": int(len(L)), "n_probes": int(len(P)),
                       "labelled_hit5": (L > 0).mean(0).tolist(), "labelled_mrr5": rr_at(L).mean(0).tolist(),
                       "probe_hit5": (P > 0).mean(0).tolist(), "probe_mrr5": rr_at(P).mean(0).tolist()}
    log("quality"); qs = {q: D.compute_quality_score(kb, q) for q in ["What is the recipe for a chocolate cake?",
          "the price of the 25th edition of the DDC in 2031", "Who won the football world cup in 1998?"]}
    hit = D._label_ranks(kb, D._labelled(idx.cases), 5) > 0
    sc = [D.compute_quality_score(kb, c.query) for c in idx.cases]
    t = pd.DataFrame({"tier": [r["quality_tier"] for r in sc], "score": [r["score"] for r in sc], "hit": hit})
    out["quality"] = {"unanswerable": {q: {"score": r["score"], "tier": r["quality_tier"], "ci": (r["ci_lower"], r["ci_upper"])} for q, r in qs.items()},
                      "labelled_by_tier": t.groupby("tier").agg(n=("hit", "size"), hit_rate=("hit", "mean"), mean_score=("score", "mean")).to_dict("index"),
                      "labelled_mean_score": float(t.score.mean()), "labelled_hit_rate": float(t.hit.mean())}
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out, default=lambda o: o.item() if hasattr(o, "item") else str(o)))

if __name__ == "__main__": main()
