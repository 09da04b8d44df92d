"""BM25Index at 10k, 100k and 1M chunks: the count-matrix index (this tree) vs the token-list index (git HEAD); prints JSON.

Usage: .venv/bin/python bench/bm25_scale.py [--sizes 10000 100000 1000000] [--old-max 100000] [--queries 100]
Real text: sentences of ../shared/data/{cisi,cacm,pt_faquad,zh_cmrc2018_dev}/corpus.jsonl (title + text), sampled with a
numpy generator seeded by a SHA-256 of the sentence pool and recombined into distinct synthetic chunks of 60-120 words
(one collection per chunk); queries are 3-8 consecutive words of held-out sentences. Each (implementation, size) runs in
its own process, so peak RSS is that run's own. Results are merged by size into bench/measured/bm25_scale.json.
"""
import argparse, gc, hashlib, importlib.util, json, os, re, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
NAMES = ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")
OUT = ROOT / "bench" / "measured" / "bm25_scale.json"


def _status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field): return int(line.split()[1]) * 1024
    return 0

def _reset_peak():
    "Reset VmHWM to the current RSS (Linux >= 4.0); False if not possible."
    try:
        with open("/proc/self/clear_refs", "w") as f: f.write("5")
        return True
    except OSError: return False

def _dir_bytes(d): return sum(f.stat().st_size for f in Path(d).iterdir() if f.is_file())


def corpus(n:int, n_queries:int):
    "n distinct chunk ids and texts and n_queries query strings, deterministic in the shared data."
    import numpy as np
    from local_knowledge_trainer.text import count_words, CJK_CLASS
    from local_knowledge_trainer.core import chunk_id
    split = re.compile(r"(?<=[.!?。！？])\s*")
    pools = {}
    for name in NAMES:
        sents = []
        for line in open(SHARED / name / "corpus.jsonl", encoding="utf-8"):
            d = json.loads(line)
            for s in split.split((d.get("title", "") + ". " + d.get("text", "")).replace("\n", " ")):
                s = s.strip()
                if count_words(s) >= 3: sents.append(s)
        pools[name] = sorted(set(sents))
    seed = int.from_bytes(hashlib.sha256("\x1e".join("\x1f".join(p) for p in pools.values()).encode()).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    held, train = {}, {}
    for name, p in pools.items():
        perm = rng.permutation(len(p)); h = max(25, len(p) // 50)
        held[name] = [p[i] for i in perm[:h]]; train[name] = [p[i] for i in perm[h:]]
    names = list(NAMES)
    wts = np.array([len(train[k]) for k in names], float); wts /= wts.sum()
    wlen = {k: np.array([count_words(s) for s in train[k]]) for k in names}
    ids, texts, seen = [], [], set()
    which = rng.choice(len(names), size=n * 2, p=wts); target = rng.integers(60, 121, size=n * 2)
    j = 0
    while len(texts) < n:
        k = names[which[j]]; goal = target[j]; j += 1
        picks = rng.integers(0, len(train[k]), size=64)
        cs = np.cumsum(wlen[k][picks]); m = int(np.searchsorted(cs, goal)) + 1
        t = " ".join(train[k][i] for i in picks[:m])
        h = hashlib.sha256(t.encode()).digest()
        if h in seen: continue
        seen.add(h); texts.append(t); ids.append(chunk_id(f"{k}/synthetic", t, salt=len(texts)))
    word = re.compile(rf"[{CJK_CLASS}]|[^\W{CJK_CLASS}]+")
    queries = []
    for q in range(n_queries):
        k = names[q % len(names)]; s = held[k][rng.integers(len(held[k]))]
        w = word.findall(s); L = int(rng.integers(3, 9)); a = int(rng.integers(0, max(1, len(w) - L + 1)))
        queries.append(("" if k.startswith("zh") else " ").join(w[a:a + L]))
    return ids, texts, queries


def load_old():
    "git HEAD's lexical.py as a separate module (local_knowledge_trainer.lexical_head)."
    src = subprocess.run(["git", "-C", str(ROOT), "show", "HEAD:local_knowledge_trainer/lexical.py"], capture_output=True,
                         text=True, check=True).stdout
    import local_knowledge_trainer
    spec = importlib.util.spec_from_loader("local_knowledge_trainer.lexical_head", loader=None)
    mod = importlib.util.module_from_spec(spec); mod.__package__ = "local_knowledge_trainer"
    sys.modules[spec.name] = mod; exec(compile(src, "HEAD:lexical.py", "exec"), mod.__dict__)
    return mod


def worker(impl:str, n:int, n_queries:int, res:str):
    import numpy as np
    lex = load_old() if impl == "old" else __import__("local_knowledge_trainer.lexical", fromlist=["x"])
    t = time.perf_counter(); ids, texts, queries = corpus(n, n_queries); gen_s = time.perf_counter() - t
    from local_knowledge_trainer.text import count_words
    out = {"impl": impl, "n": n, "loadavg_1min_at_start": round(os.getloadavg()[0], 1), "corpus_s": round(gen_s, 1),
           "words_per_chunk_mean": round(float(np.mean([count_words(t) for t in texts[:2000]])), 1)}
    gc.collect(); rss0 = _status("VmRSS:"); peak_ok = _reset_peak()
    ix = lex.BM25Index()
    t = time.perf_counter()
    for s in range(0, n, 10_000): ix.add(ids[s:s + 10_000], texts[s:s + 10_000])
    add_s = time.perf_counter() - t
    t = time.perf_counter(); ix._ensure(); build_s = time.perf_counter() - t
    out.update(add_s=round(add_s, 2), add_docs_per_s=round(n / add_s), build_s=round(build_s, 2),
               peak_rss_delta_mb=round((_status("VmHWM:") - rss0) / 2**20) if peak_ok else None,
               rss_delta_after_build_mb=round((_status("VmRSS:") - rss0) / 2**20),
               rss_bytes_per_doc=round((_status("VmRSS:") - rss0) / n))
    if impl == "new":
        arrays = sum(g.a.nbytes for g in (ix._indptr, ix._cols, ix._cnt, ix._dl, ix._key, ix._alive))
        csc = ix._csc.data.nbytes + ix._csc.indices.nbytes + ix._csc.indptr.nbytes + ix._score.nbytes
        out.update(nnz=int(ix._cols.n), n_terms=len(ix._vocab), nnz_per_doc=round(ix._cols.n / n, 1),
                   csr_array_bytes_per_doc=round(arrays / n), csc_query_bytes_per_doc=round(csc / n))
    # many small adds into the built index, then one query (the lazy rebuild)
    extra = [f"extra{i}" for i in range(100)]
    t = time.perf_counter()
    for i in range(0, 100, 10): ix.add(extra[i:i + 10], texts[i:i + 10])
    small_add_s = time.perf_counter() - t
    t = time.perf_counter(); ix.search(queries[0], 20); requery_s = time.perf_counter() - t
    ix.remove(extra)
    out.update(small_adds_10x10_s=round(small_add_s, 3), first_query_after_small_adds_s=round(requery_s, 2))
    with tempfile.TemporaryDirectory(dir=os.environ.get("BM25_BENCH_TMP")) as d:
        t = time.perf_counter(); ix.save(d); save_s = time.perf_counter() - t
        size = _dir_bytes(d)
        del ix; gc.collect()
        rss1 = _status("VmRSS:"); _reset_peak()
        t = time.perf_counter(); ix = lex.BM25Index.load(d); load_s = time.perf_counter() - t
        t = time.perf_counter(); ix.search(queries[0], 20); first_s = time.perf_counter() - t
        out.update(save_s=round(save_s, 2), disk_mb=round(size / 2**20, 1), disk_bytes_per_doc=round(size / n),
                   load_s=round(load_s, 2), first_query_after_load_s=round(first_s, 2),
                   open_plus_first_query_s=round(load_s + first_s, 2),
                   load_peak_rss_delta_mb=round((_status("VmHWM:") - rss1) / 2**20) if peak_ok else None,
                   rss_delta_after_load_and_query_mb=round((_status("VmRSS:") - rss1) / 2**20))
    lat, tops = [], []
    for q in queries:
        t = time.perf_counter(); r = ix.search(q, 20); lat.append(time.perf_counter() - t); tops.append(r)
    lat = np.array(lat) * 1000
    out.update(query_p50_ms=round(float(np.percentile(lat, 50)), 2), query_p95_ms=round(float(np.percentile(lat, 95)), 2))
    out["get_scores_latency"] = get_scores_latency(ix, queries)
    if impl == "new":
        t = time.perf_counter(); ix._rows(); out["csr_rows_from_loaded_csc_s"] = round(time.perf_counter() - t, 2)
        out["on_the_fly_alternative"] = on_the_fly(lex, ix, queries)
    json.dump({"queries": queries, "tops": tops}, open(res, "w"))
    out["loadavg_1min_at_end"] = round(os.getloadavg()[0], 1)
    print(json.dumps(out))


def on_the_fly(lex, ix, queries):
    "The alternative to the precomputed scores: idf × okapi_tf computed per query from the CSC counts (same float32 scores)."
    import numpy as np
    t = time.perf_counter()
    csc = ix._csc; dl = ix._dl.v.astype(float); idf = lex.okapi_idf(np.diff(csc.indptr), len(dl))
    norm = ix.k1 * (1 - ix.b + ix.b * dl / dl.mean())
    build_s = time.perf_counter() - t
    lat, diff = [], 0.0
    for q in queries:
        t = time.perf_counter()
        s = np.zeros(len(dl), np.float32)
        for c in [ix._vocab[w] for w in ix.tokenizer(q) if w in ix._vocab]:
            a, e = csc.indptr[c], csc.indptr[c + 1]; d = csc.indices[a:e]; f = csc.data[a:e]
            s[d] += (idf[c] * (f * (ix.k1 + 1) / (f + norm[d]))).astype(np.float32)
        lat.append(time.perf_counter() - t)
        diff = max(diff, float(np.abs(s - ix.get_scores(q)).max()))
    lat = np.array(lat) * 1000
    return {"build_s_after_tocsc": round(build_s, 2), "query_p50_ms": round(float(np.percentile(lat, 50)), 2),
            "query_p95_ms": round(float(np.percentile(lat, 95)), 2), "max_abs_score_diff_vs_precomputed": diff,
            "note": "score vectors only (compare get_scores_latency), without search's top-k"}


def get_scores_latency(ix, queries):
    "get_scores alone (no top-k), to compare with the precomputed engine."
    import numpy as np
    lat = []
    for q in queries:
        t = time.perf_counter(); ix.get_scores(q); lat.append(time.perf_counter() - t)
    lat = np.array(lat) * 1000
    return {"p50_ms": round(float(np.percentile(lat, 50)), 2), "p95_ms": round(float(np.percentile(lat, 95)), 2)}


def run(impl, n, n_queries):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f: res = f.name
    p = subprocess.run([sys.executable, __file__, "--worker", impl, "--n", str(n), "--queries", str(n_queries), "--res", res],
                       capture_output=True, text=True)
    if p.returncode: return {"impl": impl, "n": n, "error": p.stderr.strip().splitlines()[-1:]}, None
    out = json.loads(p.stdout.strip().splitlines()[-1]); r = json.load(open(res)); os.unlink(res)
    return out, r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--old-max", type=int, default=100_000, help="largest size run with the HEAD implementation")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--worker", choices=["old", "new"]); ap.add_argument("--n", type=int); ap.add_argument("--res")
    a = ap.parse_args(argv)
    if a.worker: return worker(a.worker, a.n, a.queries, a.res)
    if not all((SHARED / n / "corpus.jsonl").exists() for n in NAMES):
        print(json.dumps({"bench": "bm25_scale", "skipped": f"{SHARED}/{{{','.join(NAMES)}}}/corpus.jsonl not found"})); return 0
    sizes = {}
    for n in a.sizes:
        new, rn = run("new", n, a.queries)
        row = {"new": new}
        if n <= a.old_max:
            old, ro = run("old", n, a.queries)
            row["old"] = old
            if rn and ro:
                same = sum([i for i, _ in x] == [i for i, _ in y] for x, y in zip(rn["tops"], ro["tops"]))
                dmax = max((abs(s - t) for x, y in zip(rn["tops"], ro["tops"]) for (_, s), (_, t) in zip(x, y)), default=0.0)
                row["agreement"] = {"queries": len(rn["tops"]), "same_top20_ids": same, "max_abs_top20_score_diff": dmax}
        else: row["old"] = f"skipped above {a.old_max} chunks (token lists in memory: see the 100k RSS, ~linear in n)"
        sizes[str(n)] = row
        print(json.dumps({str(n): row}), flush=True)
    out = {"bench": "bm25_scale", "machine": f"{os.cpu_count()} cores", "python": sys.version.split()[0],
           "data": "sentences of cisi, cacm, pt_faquad, zh_cmrc2018_dev recombined into 60-120-word chunks (content-seeded)",
           "queries": f"{a.queries} queries of 3-8 consecutive words from held-out sentences, search(q, k=20)",
           "old": "git HEAD lexical.py (token lists, JSON-lines persistence)", "new": "this tree (CSR counts, CSC counts + float32 scores for queries, npz)",
           "sizes": None}
    prev = json.loads(OUT.read_text()) if OUT.exists() else {}  # read now: another run may have written other sizes
    sizes = {**prev.get("sizes", {}), **sizes}; out["sizes"] = dict(sorted(sizes.items(), key=lambda kv: int(kv[0])))
    OUT.parent.mkdir(parents=True, exist_ok=True); OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
