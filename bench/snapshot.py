"""Query time with answer confidence when the knowledge base's snapshot is re-checked by the store's `version` (the
default) against re-reading and hashing every chunk id on each call (the former check), in one run on one base.

Real text: CISI + CACM documents from ../shared/data as text files, chunked at 64 words (about 11k chunks). The embedder
is the hashing test double (HashingEmbedder(384)), so the query encode costs nothing and the difference is the check.
Prints one JSON object."""
import argparse, json, os, statistics, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    a = ap.parse_args()
    if not (SHARED / "cisi" / "corpus.jsonl").exists():
        print(json.dumps({"bench": "snapshot", "skipped": f"{SHARED} not found"})); return
    from local_knowledge_trainer.embeddings import HashingEmbedder
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    work = Path(a.work or tempfile.mkdtemp(prefix="lkt-bench-snapshot-"))
    docs = work / "docs"
    if not docs.exists():
        docs.mkdir(parents=True)
        for coll in ("cisi", "cacm"):
            for line in open(SHARED / coll / "corpus.jsonl", encoding="utf-8"):
                r = json.loads(line)
                (docs / f"{coll}_{r['_id']}.txt").write_text(r.get("title", "") + "\n\n" + r["text"], encoding="utf-8")
    kw = dict(embedding_model=HashingEmbedder(384), persist_dir=str(work / "kb"), show_progress=False, build_graph=False,
              tune_fusion=False, warm=False, chunk_size=64, chunk_overlap=8)
    kt = KnowledgeTrainer(**kw)
    if kt.store.count_chunks() == 0: kt.ingest(str(docs))
    qs = [json.loads(l)["text"] for l in open(SHARED / "cisi" / "queries.jsonl", encoding="utf-8")][: a.queries + 1]
    kt.query(qs[0], k=5)                                  # fit the confidence model once (not timed)
    out = {"bench": "snapshot", "chunks": kt.store.count_chunks(), "queries": len(qs) - 1,
           "embedder": "HashingEmbedder(384) test double (no model encode)", "ms_per_query": {}}
    store_cls = type(kt.store)
    for arm in ("version check", "ids re-read (before)"):
        if arm.startswith("ids"): kt.kb.store = _NoVersion(kt.store)
        ts = []
        for q in qs[1:]:
            t = time.perf_counter(); kt.query(q, k=5); ts.append((time.perf_counter() - t) * 1000)
        out["ms_per_query"][arm] = {"p50": round(statistics.median(ts), 1), "mean": round(statistics.fmean(ts), 1)}
    m = out["ms_per_query"]
    out["ratio_before_over_now_p50"] = round(m["ids re-read (before)"]["p50"] / m["version check"]["p50"], 2)
    print(json.dumps(out, indent=1))


class _NoVersion:
    "The same store without `version`: the snapshot then re-reads and hashes every chunk id on each call, as before."
    def __init__(self, st): self.__dict__["_st"] = st
    def __getattr__(self, n):
        if n == "version": raise AttributeError(n)
        return getattr(self._st, n)


if __name__ == "__main__": main()
