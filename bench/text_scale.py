"""Text mode at 1M chunks: `EvidenceStore.search_text` (this tree) against the query it ran before issue 27; prints JSON.

    nice -n 10 .venv/bin/python bench/text_scale.py [--n 1000000] [--out bench/measured/text_scale.json]

The base is built once and kept in $LKT_TEXT_SCALE_DIR (default /tmp/lkt_text_scale), so reruns only query: the corpus
is bench/scale.py's `make_corpus` (real sentences of the shared collections cisi, cacm, pt_faquad, zh_cmrc2018_dev,
content-seeded, recombined into documents of ~100 chunks of 80 words: 1,015,688 chunks, as scale.py's 1M base), parsed
by `DocumentParser(80, 0)` and written with `EvidenceStore.add_document` (no embedding: text mode reads no vector).
The queries are scale.py's 200: 3-8 consecutive words of held-out sentences.

Before = the query `search_text` ran before issue 27 (every phrase OR-ed, BM25 over every matching row), reproduced
inline here as the reference; after = `search_text` now, with its default budget (`TEXT_MAX_COST`): `after_cold`
remembers no count from an earlier query, `after` is one open base answering the 200 queries in turn. The three run on
the same file, interleaved query by query (the order rotating), in one process. Each query's top 10 is compared with
before's: equal (ids and scores) where search_text says it is exact, the share of before's ids it returns where it is
not. The same queries then run under other budgets (`max_cost`), against the same before results. Last, on each shared
collection (a store of its whole corpus, one chunk per document), the top 10 of every query of queries.jsonl: before
against after.
"""
import argparse, json, os, platform, sqlite3, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "bench"))
SHARED = ROOT.parent / "shared" / "data"
COLLECTIONS = ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")
WORK = Path(os.environ.get("LKT_TEXT_SCALE_DIR", "/tmp/lkt_text_scale"))


def old_search_text(store, query:str, k:int=10) -> list:
    "The text search as it was before issue 27 (the reference): every phrase OR-ed, ranked by BM25 over all matches."
    from local_knowledge_trainer.store import clean_query, fts_query
    from local_knowledge_trainer.text import match_form
    query = match_form(clean_query("" if query is None else query))
    q = fts_query(query)
    if q is not None:
        return [(r[0], float(r[1])) for r in store._rows(
            "SELECT c.id, -bm25(chunks_fts) AS s FROM chunks_fts JOIN chunks c ON c.rid = chunks_fts.rowid "
            "WHERE chunks_fts MATCH ? ORDER BY s DESC, c.rid LIMIT ?", (q, int(k)))]
    q = query.strip().lower()
    if not q: return []
    return [(r[0], float(r[1])) for r in store._rows(
        "SELECT id, (length(text) - length(replace(lower(text), ?, ''))) / CAST(length(?) AS REAL) AS s "
        "FROM chunks WHERE instr(lower(text), ?) > 0 ORDER BY s DESC, rid LIMIT ?", (q, q, q, int(k)))]


def build(n:int) -> dict:
    "The base of n chunks in WORK (built once: reused when its 'done' marker exists)."
    from scale import make_corpus
    from local_knowledge_trainer.parser import DocumentParser
    from local_knowledge_trainer.store import EvidenceStore
    db, done = WORK / f"evidence_{n}.sqlite", WORK / f"done_{n}.json"
    if done.exists(): return {**json.loads(done.read_text()), "reused": True}
    corpus = WORK / f"corpus_{n}"
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")): p.unlink(missing_ok=True)
    t = time.perf_counter(); info = make_corpus(n, corpus); info["generate_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter(); P = DocumentParser(80, 0); files = sorted(corpus.glob("*.txt"))
    with EvidenceStore(db) as st:
        for s in range(0, len(files), 200):
            with st.transaction():
                for f in files[s:s + 200]:
                    d = P.parse_file(f, source=f.name)
                    if d.ok: st.add_document(d)
            print(f"{s + 200}/{len(files)} files, {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        info.update(chunks=st.count_chunks(), build_s=round(time.perf_counter() - t, 1))
    info["evidence_mb"] = round(db.stat().st_size / 2**20)
    done.write_text(json.dumps(info))
    return {**info, "reused": False}


BUDGETS = (1_000_000, 2_000_000, 3_000_000, 4_000_000)   # max_cost values swept


def overlap(a:list, b:list, k:int) -> float:
    "Share of the top-k ids of b that a also returns (1 when both are empty)."
    if not a and not b: return 1.0
    return len({i for i, _ in a} & {i for i, _ in b}) / max(1, min(k, len(b)))


def pct(ms:list) -> dict:
    import numpy as np
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2), "max_ms": round(max(ms), 2), "mean_ms": round(sum(ms) / len(ms), 2)}


def at_scale(n:int, k:int=10) -> dict:
    "Before and after on the base of n chunks: latencies, and how the results compare query by query."
    from local_knowledge_trainer.store import EvidenceStore, fts_phrases, TEXT_MAX_COST
    from local_knowledge_trainer.text import match_form
    db = WORK / f"evidence_{n}.sqlite"
    qs = json.loads((WORK / f"queries_{n}.json").read_text())
    with open(db, "rb") as f:                           # the file in the OS cache, as for a base in use
        while f.read(1 << 24): pass
    cold, warm = EvidenceStore(db, readonly=True), EvidenceStore(db, readonly=True)
    def run(name, q):
        if name == "cold": cold.__dict__.pop("_cache", None)   # no count remembered from an earlier query
        t = time.perf_counter()
        r = old_search_text(cold, q, k) if name == "before" else (cold if name == "cold" else warm).search_text(q, k)
        return r, (time.perf_counter() - t) * 1000
    ms = {"before": [], "cold": [], "warm": []}; rows = []
    for j, q in enumerate(qs):
        names = ["before", "cold", "warm"]; names = names[j % 3:] + names[:j % 3]   # no mode always first
        got = {}
        for name in names: got[name], t = run(name, q); ms[name].append(t)
        b, a = got["before"], got["cold"]
        rows.append({"before": b, "phrases": len(fts_phrases(match_form(q))), "exact": a.exact, "sampled": a.sampled, "dropped": list(a.dropped), "cost": a.cost,
                     "equal": a == b, "ids_equal": [i for i, _ in a] == [i for i, _ in b],
                     "overlap": overlap(a, b, k), "same_as_warm": a == got["warm"]})
    budgets = {}
    for c in BUDGETS:   # the same queries under other budgets, against the same "before" results
        t, o, lim = [], [], 0
        for q, r in zip(qs, rows):
            cold.__dict__.pop("_cache", None)
            t0 = time.perf_counter(); a = cold.search_text(q, k, max_cost=c); t.append((time.perf_counter() - t0) * 1000)
            o.append(overlap(a, r["before"], k)); lim += not a.exact
        budgets[str(c)] = {**{x: v for x, v in pct(t).items() if x in ("p50_ms", "p95_ms")}, "limited_queries": lim,
                           "overlap_at_10_with_before_mean": round(sum(o) / len(o), 4)}
    cold.close(); warm.close()
    for r in rows: r.pop("before")
    ex = [r for r in rows if r["exact"]]; lim = [r for r in rows if not r["exact"]]
    return {"queries": len(qs), "k": k, "max_cost": TEXT_MAX_COST, "queries_without_a_phrase": sum(r["phrases"] == 0 for r in rows),
            "before": pct(ms["before"]), "after_cold": pct(ms["cold"]), "after": pct(ms["warm"]),
            "p95_after_cold_over_before": round(pct(ms["cold"])["p95_ms"] / pct(ms["before"])["p95_ms"], 4),
            "p95_after_over_before": round(pct(ms["warm"])["p95_ms"] / pct(ms["before"])["p95_ms"], 4),
            "exact_queries": len(ex), "exact_queries_equal_to_before": sum(r["equal"] for r in ex),
            "limited_queries": len(lim), "limited_top10_ids_equal_to_before": sum(r["ids_equal"] for r in lim),
            "limited_overlap_at_10_with_before_mean": round(sum(r["overlap"] for r in lim) / max(1, len(lim)), 4),
            "sampled_queries": sum(r["sampled"] for r in rows),
            "sampled_overlap_at_10_with_before_mean": round(sum(r["overlap"] for r in rows if r["sampled"]) / max(1, sum(r["sampled"] for r in rows)), 4),
            "all_overlap_at_10_with_before_mean": round(sum(r["overlap"] for r in rows) / len(rows), 4),
            "cold_equal_to_warm": sum(r["same_as_warm"] for r in rows),
            "max_cost_sweep (after_cold)": budgets,
            "limited": [{"q": q, "dropped": r["dropped"], "cost": r["cost"], "overlap_at_10": round(r["overlap"], 2)}
                        for q, r in zip(qs, rows) if not r["exact"]]}


def anatomy(n:int) -> dict:
    "What FTS5 spends on two phrases of the 1M base: a common one and a rare one of many common trigrams."
    con = sqlite3.connect(f"file:{WORK / f'evidence_{n}.sqlite'}?mode=ro", uri=True)
    con.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, chunks_fts, 'row')")
    def ms(sql, args, reps=3):
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter(); r = con.execute(sql, args).fetchall(); best = min(best, (time.perf_counter() - t) * 1000)
        return r, round(best, 1)
    out = {}
    for p in ("the", "computational"):
        q = f'"{p}"'
        (rows,), count_ms = ms("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (q,))[0][0], ms("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (q,))[1]
        grams = list(dict.fromkeys(p[i:i + 3] for i in range(len(p) - 2)))
        postings = sum(con.execute("SELECT doc FROM v WHERE term=?", (g,)).fetchone()[0] for g in grams)
        _, vocab_ms = ms("SELECT doc FROM v WHERE term=?", (max(grams, key=lambda g: con.execute("SELECT doc FROM v WHERE term=?", (g,)).fetchone()[0]),))
        _, old_ms = ms("SELECT c.id, -bm25(chunks_fts) AS s FROM chunks_fts JOIN chunks c ON c.rid = chunks_fts.rowid "
                       "WHERE chunks_fts MATCH ? ORDER BY s DESC, c.rid LIMIT 10", (q,), 2)
        _, now_ms = ms("SELECT c.id, t.s FROM (SELECT rowid AS r, -bm25(chunks_fts) AS s FROM chunks_fts WHERE chunks_fts "
                       "MATCH ? ORDER BY s DESC, rowid LIMIT 10) t JOIN chunks c ON c.rid = t.r ORDER BY t.s DESC, t.r", (q,), 2)
        out[p] = {"rows": rows, "trigrams": len(grams), "postings": postings, "count_ms": count_ms,
                  "ns_per_posting_counted": round(count_ms * 1e6 / postings, 1), "fts5vocab_lookup_of_commonest_trigram_ms": vocab_ms,
                  "ranked_before_ms": old_ms, "ranked_now_ms": now_ms}
    t = out["the"]   # one trigram, postings = rows: what a row costs beyond bm25's two passes over its postings
    out["the"]["us_per_row_ranked_beyond_two_counts"] = round((t["ranked_now_ms"] - 2 * t["count_ms"]) * 1000 / t["rows"], 2)
    con.close()
    return out


def shared_equality(k:int=10) -> dict:
    "On each shared collection (one chunk per document: title, blank line, text): top-k of every query, before vs after."
    from local_knowledge_trainer.core import Chunk, Document, chunk_id
    from local_knowledge_trainer.store import EvidenceStore
    out = {}
    for name in COLLECTIONS:
        st = EvidenceStore()
        with open(SHARED / name / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                d = json.loads(line); text = "\n\n".join(x for x in (d.get("title"), d.get("text")) if x)
                if text.strip():
                    st.add_document(Document(source=str(d["_id"]), format="text",
                                             chunks=[Chunk(id=chunk_id(str(d["_id"]), text), text=text, source=str(d["_id"]))]))
        with open(SHARED / name / "queries.jsonl", encoding="utf-8") as f: qs = [json.loads(l)["text"] for l in f]
        a = [st.search_text(q, k) for q in qs]; b = [old_search_text(st, q, k) for q in qs]
        out[name] = {"chunks": st.count_chunks(), "queries": len(qs), "top10_ids_equal": sum([i for i, _ in x] == [i for i, _ in y] for x, y in zip(a, b)),
                     "ids_and_scores_equal": sum(x == y for x, y in zip(a, b)), "limited": sum(not x.exact for x in a)}
        st.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000); ap.add_argument("--out")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--anatomy-only", action="store_true", help="measure only the anatomy section and add it to --out")
    a = ap.parse_args()
    if not SHARED.exists():
        print(json.dumps({"skipped": f"{SHARED} not found: the bench samples its text from the shared collections"})); return
    import local_knowledge_trainer
    WORK.mkdir(parents=True, exist_ok=True)
    info = build(a.n)
    if a.build_only: print(json.dumps(info)); return
    if a.anatomy_only:
        res = json.loads(Path(a.out).read_text()) if a.out and Path(a.out).exists() else {}
        res["anatomy"] = anatomy(a.n)
        s = json.dumps(res, indent=1, ensure_ascii=False)
        if a.out: Path(a.out).write_text(s + "\n")
        print(s); return
    res = {"bench": "text_scale", "before": "search_text's query before issue 27 (every phrase OR-ed, BM25 over every matching row)",
           "after": "search_text now (after_cold: no trigram count remembered from an earlier query; after: as one open base "
                    "answers the 200 queries in turn)",
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                       "lkt": local_knowledge_trainer.__version__},
           "base": info, "text_mode": at_scale(a.n), "shared_collections": shared_equality(), "anatomy": anatomy(a.n)}
    s = json.dumps(res, indent=1, ensure_ascii=False)
    if a.out: Path(a.out).write_text(s + "\n")
    print(s)


if __name__ == "__main__":
    main()
