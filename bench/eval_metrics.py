"""Ranking metrics and multiple-comparison corrections: LKT's hand-written code against the libraries it could call.

Prints ONE JSON object on stdout (progress on stderr); no timing assertions. Two questions, each with its measured answer:

  ranx        Should `golden.ranking_metrics` be replaced by ranx at runtime? For ranx and for LKT's metrics: the import
              time in a fresh process (median of --runs) and what ranx's import brings in; the first call in a fresh
              process with numba's on-disk cache warm (the normal case) and cold (NUMBA_CACHE_DIR empty: what a user
              pays once after an install or upgrade); the per-call time on the same rankings (the sample corpus run,
              56 golden queries x 3 modes at k=10, as `evaluate` scores them, and --synthetic random graded queries);
              and the largest per-query difference between the two on every metric they share.
  statsmodels Does `multiple_testing.correct_pvalues` still need its own Holm/Bonferroni/BH? statsmodels' `multipletests`
              calls `gc.collect()` in its Holm branch on every call, so its cost grows with the live objects of the
              process. Per-call time of multipletests(method) against correct_pvalues, in a bare process and with
              --objects live containers (a stand-in for a process holding a corpus), and in a process that has loaded
              LKT's embedding model (torch, transformers) and a knowledge base of the sample corpus.

  .venv/bin/python bench/eval_metrics.py [--runs 5] [--synthetic 2000] [--objects 2000000] [--no-model]
"""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
METRICS = ("ndcg", "recall", "precision", "hit_rate", "mrr", "map")  # the ones ranx has (context_precision, forbidden: LKT only)


def log(*a): print(*a, file=sys.stderr, flush=True)


def py(code: str, env=None) -> dict:
    "Run `code` in a fresh interpreter from the repository root; it prints one JSON object."
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env or ENV, capture_output=True, text=True)
    if r.returncode: raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


IMPORT = """
import json, sys, time
t, c = time.perf_counter(), time.process_time(); import {mod}; dt, dc = time.perf_counter() - t, time.process_time() - c
print(json.dumps({{"s": dt, "cpu_s": dc, "modules": len(sys.modules), "heavy": sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy}))}}))
"""
HEAVY = {"numba", "llvmlite", "pandas", "scipy", "ir_datasets", "fastparquet", "seaborn", "matplotlib", "rich", "statsmodels"}

FIRST_CALL = """
import json, time
import numpy as np
c0, t0 = time.process_time(), time.perf_counter(); import ranx; c1, t1 = time.process_time(), time.perf_counter()
rng = np.random.default_rng(0)
qrels = {f"q{i}": {f"d{j}": int(rng.integers(1, 3)) for j in range(3)} for i in range(50)}
run = {f"q{i}": {f"d{j}": float(10 - j) for j in range(10)} for i in range(50)}
t2 = time.perf_counter(); q, r = ranx.Qrels(qrels), ranx.Run(run)
c2 = time.process_time(); ranx.evaluate(q, r, [m + "@10" for m in %r]); t3, c3 = time.perf_counter(), time.process_time()
ranx.evaluate(q, r, [m + "@10" for m in %r]); t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "import_cpu_s": c1 - c0, "first_call_s": t3 - t2, "first_call_cpu_s": c3 - c2, "second_call_s": t4 - t3}))
""" % (METRICS, METRICS)


def best(f, repeats=5):
    f(); ts = []
    for _ in range(repeats):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return min(ts)


def sample_rankings():
    "The sample corpus run (hashing embedder, all modes, k=10): per (mode, query) the credited labels and the judgments."
    os.chdir(ROOT)
    from local_knowledge_trainer.embeddings import HashingEmbedder
    from local_knowledge_trainer.parser import DocumentParser
    from local_knowledge_trainer.index import KnowledgeBase
    from local_knowledge_trainer.runs import evaluate
    kb = KnowledgeBase.from_chunks([c for d in DocumentParser().parse("evals/sample_corpus") for c in d.chunks], HashingEmbedder(256))
    return evaluate(kb, "evals/golden.jsonl", mode="all", k=10, progress=False, command="bench")


def synthetic(n_q: int, k: int = 10, seed: int = 0):
    "Random graded judgments and rankings (repeated units become distinct unjudged ids, as LKT credits a key once)."
    import numpy as np
    rng = np.random.default_rng(seed); qrels, labels, run = {}, {}, {}
    for q in range(n_q):
        pool = [f"d{j}" for j in range(30)]
        rel = {str(d): int(rng.integers(0, 3)) for d in rng.choice(pool, size=int(rng.integers(1, 15)), replace=False)}
        if not any(v > 0 for v in rel.values()): rel[pool[0]] = 1
        lab = [str(x) for x in rng.choice(pool, size=int(rng.integers(1, 14)))]
        seen, units = set(), {}
        for i, l in enumerate(lab):
            units[l if l not in seen else f"_dup{i}"] = float(len(lab) - i); seen.add(l)
        qid = f"q{q:05d}"; qrels[qid], labels[qid], run[qid] = rel, lab, units
    return qrels, labels, run


def compare_metrics(qrels: dict, labels: dict, run: dict, k: int, repeats: int) -> dict:
    "Per-call time of LKT's metrics and ranx's on the same rankings, and their largest per-query difference."
    import numpy as np, ranx
    from local_knowledge_trainer.golden import ranking_metrics
    names = [f"{m}@{k}" for m in METRICS]
    lkt = lambda: {q: ranking_metrics(labels[q], qrels[q], k=k) for q in qrels}
    t_lkt = best(lkt, repeats)
    t_ranx_eval = best(lambda: ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), names, return_mean=False, make_comparable=True), repeats)
    Q, R = ranx.Qrels(qrels), ranx.Run(run)
    t_ranx_only = best(lambda: ranx.evaluate(Q, R, names, return_mean=False, make_comparable=True), repeats)
    ours, ref = lkt(), ranx.evaluate(Q, R, names, return_mean=False, make_comparable=True)
    order = list(Q.keys())
    diff = {m: float(np.max(np.abs(np.array([ours[q][m] for q in order]) - np.asarray(ref[m])))) for m in names}
    return {"queries": len(qrels), "lkt_s": round(t_lkt, 6), "ranx_with_qrels_run_construction_s": round(t_ranx_eval, 6),
            "ranx_evaluate_only_s": round(t_ranx_only, 6), "max_abs_diff": diff}


MT = """
import gc, json, sys, time
import numpy as np
sys.path.insert(0, %r)
from statsmodels.stats.multitest import multipletests
from local_knowledge_trainer.multiple_testing import correct_pvalues
junk = [[i] for i in range(%d)]  # live, gc-tracked containers
{setup}
def best(f, r=7):
    f(); ts = []
    for _ in range(r):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return min(ts)
p = np.random.default_rng(1).uniform(size=24) ** 3
out = {"gc_tracked_objects": len(gc.get_objects()), "gc_collect_s": best(gc.collect, 3)}
for meth in ("holm", "bonferroni", "fdr_bh"):
    out[meth] = {"statsmodels_s": best(lambda: multipletests(p, 0.05, meth), 3 if meth == "holm" else 7),
                 "lkt_s": best(lambda: correct_pvalues(p, meth)),
                 "max_abs_diff": float(np.max(np.abs(multipletests(p, 0.05, meth)[1] - correct_pvalues(p, meth)[1])))}
print(json.dumps(out))
"""
MODEL = """
import os; os.chdir(%r)
from local_knowledge_trainer.embeddings import Embedder
from local_knowledge_trainer.parser import DocumentParser
from local_knowledge_trainer.index import KnowledgeBase
_emb = Embedder()
_kb = KnowledgeBase.from_chunks([c for d in DocumentParser().parse("evals/sample_corpus") for c in d.chunks], _emb)
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per import / first-call timing (median)")
    ap.add_argument("--synthetic", type=int, default=2000, help="random graded queries for the per-call comparison")
    ap.add_argument("--objects", type=int, default=2_000_000, help="live containers in the 'busy process' statsmodels case")
    ap.add_argument("--no-model", action="store_true", help="skip the statsmodels case in a process with the embedding model loaded")
    a = ap.parse_args(argv)
    import numpy, ranx, statsmodels
    from importlib import metadata
    out = {"bench": "eval_metrics", "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "python": platform.python_version(), "numpy": numpy.__version__, "ranx": metadata.version("ranx"),
           "numba": metadata.version("numba"), "statsmodels": statsmodels.__version__, "cpus": os.cpu_count(), "runs": a.runs}

    log("import times ...")
    med = lambda xs: round(statistics.median(xs), 4)
    imp = {}
    for name, mod in (("ranx", "ranx"), ("lkt_golden", "local_knowledge_trainer.golden"), ("lkt_runs", "local_knowledge_trainer.runs")):
        rs = [py(IMPORT.format(mod=mod, heavy=sorted(HEAVY))) for _ in range(a.runs)]
        imp[name] = {"import_s": med([r["s"] for r in rs]), "import_cpu_s": med([r["cpu_s"] for r in rs]), "modules_loaded": rs[0]["modules"], "heavy_modules": rs[0]["heavy"]}
    out["import"] = imp
    out["ranx_requires"] = sorted(metadata.requires("ranx") or [])

    log("ranx first call, warm and cold numba cache ...")
    warm = [py(FIRST_CALL) for _ in range(a.runs)]
    cold = []
    for _ in range(max(1, a.runs // 2)):
        with tempfile.TemporaryDirectory() as d: cold.append(py(FIRST_CALL, {**ENV, "NUMBA_CACHE_DIR": d}))
    out["ranx_first_call"] = {k: {key: med([r[key] for r in v]) for key in v[0]} for k, v in (("warm_cache", warm), ("cold_cache", cold))}

    log("per-call time and agreement on the sample run ...")
    run = sample_rankings()
    from local_knowledge_trainer.golden import trec_id
    sample = {}
    for m in run.modes:
        qrels = {trec_id(q): {trec_id(key): g for key, g in rel.items()} for q, rel in run.qrels.items()}
        labels = {trec_id(q): [trec_id(l) if l is not None else None for l in run.credited[m][q]] for q in run.qrels}
        sample[m] = compare_metrics(qrels, labels, run.trec_run(m), run.k, 7)
    out["sample_run"] = sample
    log("per-call time and agreement on synthetic queries ...")
    out["synthetic"] = compare_metrics(*synthetic(a.synthetic), k=10, repeats=3)

    log("statsmodels multipletests vs correct_pvalues ...")
    sm = {"bare": py(MT.replace("{setup}", "") % (str(ROOT), 0)), "busy": py(MT.replace("{setup}", "") % (str(ROOT), a.objects))}
    if not a.no_model: sm["model_loaded"] = py(MT.replace("{setup}", MODEL % str(ROOT)) % (str(ROOT), 0))
    out["multipletests"] = {"p_values": 24, "live_containers_busy": a.objects, **sm}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
