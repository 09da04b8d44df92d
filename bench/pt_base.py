"""A 10,000-chunk Portuguese base with the product's defaults: cold ingest time, and the ingest gate's cost against a cold ingest of the same documents.

Prints ONE JSON object on stdout (progress goes to stderr). No timing assertions.
  .venv/bin/python bench/pt_base.py [--chunks 10000] [--batch 100] [--repeats 3] [--skip-gate] [--keep DIR] [--reuse DIR]

--keep DIR keeps the corpus, the built base and its cache in DIR; --reuse DIR measures the gate on a base kept there (the
ingest figures are then not measured again, and the JSON says so). Before the copies are made, a reused base gets one
`tune_fusion()` with this code: a write that draws the fusion probes and refits the confidence models as the build's last
steps do, so its embedding cache holds what a base built by this code would hold.

Corpus: the 249 paragraphs of ../shared/data/pt_faquad (real Portuguese, ~130 words each), repeated with variations until
--chunks files: variation v of a paragraph is its sentences rotated by v, after the heading "Revisão v." — every text
differs, so nothing is a cache hit, and each file is one chunk (512-word chunks; the paragraphs are shorter).
ingest   `KnowledgeTrainer(persist_dir, language="pt")` (the default model, multilingual-e5-small, its measured batch threads; the
         entity graph and the fusion tuning on, as by default) `.ingest(folder)` with a cold embedding cache; embed_s is the
         time inside `Embedder.embed_chunks`, chunks_per_s = chunks / ingest_s; target ingest_s <= 600.
gate     --batch new paragraphs (variation --chunks/249 + 1) ingested into two copies of the built base, each with a cold
         cache for those texts: plain `ingest(batch)` and gated `ingest(batch, hypothesis_test="ttest")`;
         gate_cost_ratio = gated_s / plain_s (target <= 3). The gate embeds its held-out probes through the same cache.
         --repeats pairs, the order alternating (plain first, then gated first, ...) so a drifting machine load does not
         favour one side; gate_cost_ratio is the median of the pairs' ratios, each pair listed.
probes   first, on a third copy (so the one-time imports of the process are not charged to plain): `tune_fusion()` before the batch, a plain ingest of the batch, and `tune_fusion()` again (each a write that refits the confidence
         models): seconds and embedding-cache misses of each. Probes are drawn in each chunk's own hash order, so the second
         tuning re-embeds only the probes the batch's chunks displace (its misses), not all of them.
"""
import argparse, json, os, platform, re, shutil, sys, tempfile, time
import numpy as np
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(*a): print(*a, file=sys.stderr, flush=True)

def paragraphs():
    rows = [json.loads(l) for l in open(SHARED / "pt_faquad" / "corpus.jsonl", encoding="utf-8") if l.strip()]
    return [(r["_id"], re.split(r"(?<=[.!?])\s+", r["text"].strip())) for r in rows]

def variant(sents, v): return f"Revisão {v}. " + " ".join(sents[v % len(sents):] + sents[:v % len(sents)])

def write(folder, paras, versions, limit=None):
    n = 0
    for v in versions:
        d = folder / f"v{v:03d}"; d.mkdir(parents=True, exist_ok=True)
        for pid, sents in paras:
            if limit is not None and n >= limit: return n
            (d / f"{pid}.txt").write_text(variant(sents, v), encoding="utf-8"); n += 1
    return n

class Timer:
    "Wraps Embedder.embed_chunks to add up the time spent embedding."
    def __init__(self): self.s = 0.0
    def __enter__(self):
        from local_knowledge_trainer.embeddings import Embedder
        self.orig = orig = Embedder.embed_chunks
        def timed(emb, *a, **k):
            t = time.perf_counter(); r = orig(emb, *a, **k); self.s += time.perf_counter() - t; return r
        Embedder.embed_chunks = timed; return self
    def __exit__(self, *a):
        from local_knowledge_trainer.embeddings import Embedder
        Embedder.embed_chunks = self.orig

def tuned(kt)->dict:
    "Seconds and embedding-cache misses of one `tune_fusion()` (fusion probes, then the confidence refit of the write)."
    m0 = kt.embedder.cache_stats["misses"]; t = time.perf_counter(); kt.tune_fusion()
    return {"s": round(time.perf_counter() - t, 1), "cache_misses": kt.embedder.cache_stats["misses"] - m0,
            "probes": (kt.fusion or {}).get("evidence", {}).get("n_probes")}

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3, help="plain/gated pairs (median ratio)")
    ap.add_argument("--skip-gate", action="store_true")
    ap.add_argument("--keep", help="keep the corpus, base and cache in this folder")
    ap.add_argument("--reuse", help="a folder written by --keep: measure the gate on its base")
    a = ap.parse_args(argv)
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    paras = paragraphs(); nver = -(-a.chunks // len(paras))
    tmp = Path(a.reuse or a.keep or tempfile.mkdtemp(prefix="lkt_ptbase_")); tmp.mkdir(parents=True, exist_ok=True)
    res = {"bench": "pt_base", "cpus": os.cpu_count(), "python": platform.python_version(), "load_before": [round(x, 2) for x in os.getloadavg()]}
    try:
        os.environ["LKT_CACHE_DIR"] = str(tmp / "cache")  # a cold per-user cache (threads are measured once, below, not timed)
        corpus, base = tmp / "corpus", tmp / "base"
        if a.reuse:
            kt = KnowledgeTrainer(persist_dir=str(base), language="pt"); n = kt.store.count_chunks()
            t = time.perf_counter(); kt.tune_fusion(); res["reuse_prepare_s"] = round(time.perf_counter() - t, 1)
            res.update(model=kt.embedder.name, cache_key=kt.embedder.backend.cache_key, batch_threads=kt.embedder.threads, files=n,
                       ingest=f"not measured: the base kept in {a.reuse} was reused"); kt.close()
        else:
            n = write(corpus, paras, range(nver), a.chunks)
            kt = KnowledgeTrainer(persist_dir=str(base), language="pt")
            res.update(model=kt.embedder.name, cache_key=kt.embedder.backend.cache_key, batch_threads=kt.embedder.threads, files=n)
            log(f"{n} files; model {res['model']}, {res['batch_threads']} threads")
            with Timer() as tm:
                t = time.perf_counter(); rep = kt.ingest(str(corpus)); dt = time.perf_counter() - t
            chunks = kt.store.count_chunks()
            res["ingest"] = {"chunks": chunks, "ingest_s": round(dt, 1), "embed_s": round(tm.s, 1), "chunks_per_s": round(chunks / dt, 2),
                             "embed_chunks_per_s": round(chunks / max(tm.s, 1e-9), 2), "within_600_s": dt <= 600}
            log(res["ingest"]); kt.close()
        if not a.skip_gate:
            batch = tmp / "batch"; shutil.rmtree(batch, ignore_errors=True); write(batch, paras, [nver + 1], a.batch)
            order = ["probes"] + [k for r in range(a.repeats) for k in (("plain", "gated") if r % 2 == 0 else ("gated", "plain"))]
            times = {"plain": [], "gated": []}
            for kind in order:  # probes first: it pays the process's one-time imports (spaCy, the gate), so plain and gated start equal
                copy = tmp / f"base_{kind}"; shutil.rmtree(copy, ignore_errors=True); shutil.copytree(base, copy)
                k2 = KnowledgeTrainer(persist_dir=str(copy), language="pt")
                if kind == "probes": res["probes"] = {"tune_before": tuned(k2)}
                with Timer() as tm:
                    t = time.perf_counter()
                    k2.ingest(str(batch), hypothesis_test="ttest") if kind == "gated" else k2.ingest(str(batch))
                    dt = {"s": round(time.perf_counter() - t, 2), "embed_s": round(tm.s, 2)}
                if kind == "probes": res["probes"].update(ingest_batch=dt, tune_after_batch=tuned(k2))
                else: times[kind].append(dt)
                k2.close(); log(kind, dt)
                shutil.rmtree(copy, ignore_errors=True)
            ratios = [round(g["s"] / p["s"], 3) for p, g in zip(times["plain"], times["gated"])]
            med = float(np.median(ratios))
            res["gate"] = {"batch_files": a.batch, "pairs": a.repeats, **times, "pair_ratios": ratios, "gate_cost_ratio": round(med, 2),
                           "max_ratio": max(ratios), "within_3x": med <= 3}
    finally:
        if not (a.keep or a.reuse): shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(res, indent=1, ensure_ascii=False, default=str))

if __name__ == "__main__":
    main()
