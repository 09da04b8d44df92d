"""Retrieval quality benchmark: dense, sparse and hybrid on the BEIR-layout collections in <repo>/../shared/data.

Prints ONE JSON object on stdout (progress goes to stderr). For each collection (cisi, cacm, pt_faquad, zh_cmrc2018_dev;
absent ones are skipped): nDCG@10, Recall@10 and MRR@10 per mode with 95% bootstrap CIs, and paired tests of hybrid
against each single mode (the primary test of hypothesis.compare_paired: paired bootstrap for large n, sign-flip permutation for small n; Holm across the three mode pairs,
per collection and metric). Documents are the units (one per document, title + text), searched by LKT's own Retriever
(BM25 + exact dense + RRF) through `local_knowledge_trainer.beir.BeirIndex`; embeddings are cached under
$LKT_CACHE_DIR/beir (default ~/.cache/lkt/beir), so only the first run pays for embedding (~36 passages/s on CPU).

  .venv/bin/python bench/quality.py [--datasets cisi cacm] [--max-queries 200] [--sweep]

--sweep also tries RRF weights, candidate depths and tokenizer options for hybrid and reports nDCG@10 for each.
Reference figures for a plain word-level BM25: nDCG@10 = 0.287 (CISI), 0.362 (CACM).
"""
import argparse, json, os, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
DATASETS = ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")
REFERENCE_BM25_NDCG10 = {"cisi": 0.287, "cacm": 0.362}
METRICS = ("ndcg", "recall", "mrr")

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(*a): print(*a, file=sys.stderr, flush=True)


def summarise(run, k):
    "Means with CIs per mode and hybrid-vs-single paired tests for each metric."
    from local_knowledge_trainer.runs import compare_runs
    modes = {m: {f"{x}@{k}": {"mean": round(run.aggregate[m][f"{x}@{k}"]["mean"], 4),
                              "ci": [round(run.aggregate[m][f"{x}@{k}"]["ci_low"], 4), round(run.aggregate[m][f"{x}@{k}"]["ci_high"], 4)]}
                 for x in METRICS} for m in run.modes}
    vs = {}
    for x in METRICS:
        cmp = compare_runs(run, metric=f"{x}@{k}").table
        for _, r in cmp.iterrows():
            if r["a"] != "hybrid": continue
            vs.setdefault(r["b"], {})[f"{x}@{k}"] = {
                "diff": round(r["mean_diff"], 4), "ci": [round(r["ci_low"], 4), round(r["ci_high"], 4)], "d_z": round(float(r["d_z"]), 3),
                "test": r["primary_test"], "p": float(f"{r['p_primary']:.4g}"), "p_holm": float(f"{r['p_primary_holm']:.4g}"),
                "significant": bool(r["significant"]), "mde_diff": round(float(r["mde_diff"]), 4)}
    return modes, vs


def english_like(q: str) -> bool:
    "Crude query-language test: no CJK character, no Portuguese diacritics, at least as many English as Portuguese stopwords."
    from local_knowledge_trainer.lexical import STOPWORDS, tokenize
    if any("\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af" for ch in q): return False
    toks = tokenize(q, stopwords=None, strip_accents=False)
    en, pt = STOPWORDS["en"] - STOPWORDS["pt"], STOPWORDS["pt"] - STOPWORDS["en"]
    pt |= {"quais", "qual", "onde", "quando", "quantos", "quantas", "quanto", "quem", "como", "porque", "existe", "sobre"}
    n_en, n_pt = sum(t in en for t in toks), sum(t in pt for t in toks)
    if any(ch in "ãõçáéíóúâêôàü" for ch in q.lower()): return False  # Portuguese (or other non-English) diacritics
    return n_en >= n_pt


def gated_ndcg(idx, k):
    "Hybrid nDCG@k when the dense channel only answers English-like queries (all-MiniLM-L6-v2 is an English model)."
    from local_knowledge_trainer.runs import evaluate
    kb = idx.kb
    langs = kb.dense_languages
    dense_en = lambda q, n: [(c.id, c.score) for c in kb.search(q, k=n, mode="dense")[0]] if english_like(q) else []
    kb.configure(dense_languages=("none",))  # no query language is routed to the built-in dense channel: dense_en takes its place
    kb.add_channel("dense_en", dense_en, weight=kb.weights.get("dense", 1.0), hybrid=True)
    try:
        run = evaluate(idx, idx.cases, mode="hybrid", k=k, progress=False, check=False, n_resamples=200)
        share = sum(english_like(c.query) for c in idx.cases) / len(idx.cases)
        return run, round(share, 4)
    finally:
        kb.extra_channels.pop("dense_en", None); kb.configure(dense_languages=langs)


def sweep(idx, k, tok_options):
    "Hybrid nDCG@10 (and the single modes) under other RRF weights, candidate depths and tokenizers."
    from local_knowledge_trainer.runs import evaluate
    from local_knowledge_trainer.lexical import BM25Index, make_tokenizer
    kb = idx.kb
    base_w, base_c, base_lex = dict(kb.weights), kb.candidates, kb.lexical
    out = {"weights": {}, "candidates": {}, "tokenizer": {}}
    def ndcg(modes=("hybrid",)):
        run = evaluate(idx, idx.cases, mode=list(modes), k=k, progress=False, check=False, n_resamples=200)
        return {m: round(run.aggregate[m][f"ndcg@{k}"]["mean"], 4) for m in modes}
    try:
        for wd in (0.5, 0.75, 1.5, 2.0, 3.0):
            kb.configure(weights={"dense": wd, "sparse": 1.0})
            out["weights"][f"dense={wd},sparse=1"] = ndcg()["hybrid"]
        kb.configure(weights=base_w)
        for c in (10, 50, 100):
            kb.configure(candidates=c)
            out["candidates"][str(c)] = ndcg()["hybrid"]
        kb.configure(candidates=base_c)
        docs = {c.id: c.text for c in idx.store.iter_chunks()}
        for name, kw in tok_options.items():
            kb.lexical = BM25Index(tokenizer=make_tokenizer(**kw)).fit(list(docs), list(docs.values())); kb.configure()
            out["tokenizer"][name] = ndcg(("hybrid", "sparse"))
    finally:
        kb.lexical = base_lex; kb.configure(weights=base_w, candidates=base_c)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS), help="collections under ../shared/data")
    ap.add_argument("--max-queries", type=int, default=None, help="seeded subset of the judged queries per collection")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--candidates", type=int, default=20, help="Retriever candidates per channel")
    ap.add_argument("--sweep", action="store_true", help="also try fusion weights, candidate depths and tokenizers")
    ap.add_argument("--shared", default=str(SHARED), help="folder holding the collections")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = {"bench": "quality", "k": args.k, "candidates": args.candidates, "shared": str(args.shared), "datasets": {}, "skipped": {}}
    shared = Path(args.shared)
    todo = [d for d in args.datasets if (shared / d / "corpus.jsonl").exists()]
    for d in args.datasets:
        if d not in todo: out["skipped"][d] = f"{shared / d} not found"
    if not todo:
        out["elapsed_s"] = round(time.perf_counter() - t0, 2); print(json.dumps(out)); return 0
    from local_knowledge_trainer.embeddings import Embedder
    from local_knowledge_trainer.beir import BeirIndex
    from local_knowledge_trainer.runs import evaluate, code_provenance
    emb = Embedder()
    out["embedding_model"] = emb.name
    out["code"] = {k: v for k, v in code_provenance().items() if k in ("lkt_version", "git")}
    tok_options = {"default": {}, "no_stopwords": {"stopwords": None}, "keep_accents": {"strip_accents": False},
                   "cjk_bigrams_only": {"cjk_ngrams": (2,)}, "cjk_unigrams_only": {"cjk_ngrams": (1,)}}
    for d in todo:
        t = time.perf_counter()
        log(f"== {d}")
        idx = BeirIndex(shared / d, embedder=emb, candidates=args.candidates, max_queries=args.max_queries, progress=True)
        t_idx = time.perf_counter() - t
        run = evaluate(idx, idx.cases, mode="all", k=args.k, progress=True, check=False, command="bench/quality.py")
        modes, vs = summarise(run, args.k)
        best_single = max(modes[m][f"ndcg@{args.k}"]["mean"] for m in ("dense", "sparse"))
        res = {"n_docs": idx.store.count_chunks(), "n_queries": len(idx.cases), "modes": modes, "hybrid_vs": vs,
               "hybrid_at_least_best_single_ndcg": modes["hybrid"][f"ndcg@{args.k}"]["mean"] >= best_single,
               "index_s": round(t_idx, 2), "elapsed_s": round(time.perf_counter() - t, 2)}
        if d in REFERENCE_BM25_NDCG10:
            res["reference_bm25_ndcg@10"] = REFERENCE_BM25_NDCG10[d]
            res["hybrid_beats_reference"] = modes["hybrid"][f"ndcg@{args.k}"]["mean"] > REFERENCE_BM25_NDCG10[d]
        grun, share = gated_ndcg(idx, args.k)
        g = grun.scores("hybrid", f"ndcg@{args.k}")
        from local_knowledge_trainer.hypothesis import compare_paired
        sp = run.scores("sparse", f"ndcg@{args.k}").loc[g.index]; hy = run.scores("hybrid", f"ndcg@{args.k}").loc[g.index]
        cs, ch = compare_paired(g.to_numpy(), sp.to_numpy()), compare_paired(g.to_numpy(), hy.to_numpy())
        res["language_gated_hybrid"] = {"english_like_query_share": share, f"ndcg@{args.k}": round(float(g.mean()), 4),
                                        "vs_sparse": {"diff": round(cs["mean_diff"], 4), "p": float(f"{cs['p_primary']:.4g}")},
                                        "vs_default_hybrid": {"diff": round(ch["mean_diff"], 4), "p": float(f"{ch['p_primary']:.4g}")}}
        if args.sweep:
            log(f"   sweep on {d}")
            res["sweep"] = sweep(idx, args.k, tok_options)
        out["datasets"][d] = res
        log(f"   {d}: " + ", ".join(f"{m} ndcg@{args.k}={modes[m][f'ndcg@{args.k}']['mean']:.3f}" for m in modes))
    out["elapsed_s"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
