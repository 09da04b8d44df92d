"""HNSW recall@10 and latency vs exact search on real embeddings (CISI, all-MiniLM-L6-v2); prints one JSON object.

Usage: .venv/bin/python bench/hnsw_recall.py [--ef 16 32 64 128] [--k 10] [--dataset cisi]
Embeds the ~1,460 CISI abstracts (~45 s on a CPU) and the CISI queries, then compares FAISS HNSW
(M=32, efConstruction=200) with the exact NumpyStore for each efSearch.
"""
import argparse, json, os, sys, time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="cisi")
    ap.add_argument("--ef", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--k", type=int, default=10)
    a = ap.parse_args(argv)
    d = SHARED / a.dataset
    if not (d / "corpus.jsonl").exists():
        print(json.dumps({"bench": "hnsw_recall", "skipped": f"{d} not found"})); return 0
    from local_knowledge_trainer.embeddings import Embedder
    from local_knowledge_trainer.vector_store import hnsw_recall, DEFAULT_EF_SEARCH
    docs = [json.loads(l) for l in open(d / "corpus.jsonl", encoding="utf-8")]
    qs = [json.loads(l) for l in open(d / "queries.jsonl", encoding="utf-8")]
    emb = Embedder()
    t = time.perf_counter()
    V = emb.encode([(x.get("title", "") + "\n" + x["text"]).strip() for x in docs])
    Q = emb.encode([q["text"] for q in qs])
    embed_s = time.perf_counter() - t
    r = hnsw_recall(V, Q, ef_values=a.ef, k=a.k)
    out = {"bench": "hnsw_recall", "dataset": a.dataset, "model": emb.name, "dim": int(V.shape[1]), "n_docs": len(docs),
           "n_queries": len(qs), "k": a.k, "M": r["M"], "ef_construction": r["ef_construction"], "embed_s": round(embed_s, 1),
           "exact_ms_per_query": round(r["exact_ms_per_query"], 4), "default_ef_search": DEFAULT_EF_SEARCH,
           f"recall@{a.k}": {str(ef): round(v["recall"], 4) for ef, v in r["ef"].items()},
           "hnsw_ms_per_query": {str(ef): round(v["ms_per_query"], 4) for ef, v in r["ef"].items()},
           "speedup_vs_exact": {str(ef): round(v["speedup_vs_exact"], 2) for ef, v in r["ef"].items()}}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
