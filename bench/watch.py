"""Folders kept in sync (`lkt watch`): how long until a reader finds a file created or edited, or no longer finds one
deleted, on a base of N chunks; then a burst of 1,000 file events, `doctor`, and the chunk ids against a fresh ingest.
Prints JSON.

    python bench/watch.py --chunks 10000                 # about 2 minutes
    python bench/watch.py --out bench/measured/watch.json   # 100k chunks (the default): about 15 minutes

The corpus is bench/scale.py's (real sentences of the shared collections cisi, cacm, pt_faquad and zh_cmrc2018_dev in
documents of about 100 chunks of 80 words, content-seeded) and so is the embedder, a fast stand-in (signed CRC-32
feature hashing into 384 dimensions, `scale.TimedHashing`): what is measured is the watcher, the write and the publish,
not a model. A `FolderWatcher` runs in this process; the reader is another process (a `KnowledgeTrainer` opened on the
base, as `lkt search` or a server would be) that refreshes and searches (BM25, `mode="sparse"`, which reads the published
index) for a word only the probe file holds, every 10 ms, until it is found — or, for a deletion or an edit's old word,
no longer found. Each latency is from the moment the file operation returned to the moment the reader's answer
changed, on one clock (the machine's): `publish_s` is the part until the watcher's batch had published, the rest the
reader loading the new generation. The reference in the same run is what users do today: the same created file made
searchable by `ingest(FOLDER, sync=True)` (`lkt ingest FOLDER --sync`), timed the same way with the watcher stopped.

The burst: 500 small files created, 300 documents of the corpus edited (a sentence appended) and 200 deleted (at most
half the corpus; a corpus of fewer than 500 documents has some saved more than once), in a seeded random order, as fast as the disk takes them; then the number of batches and publishes it took, `doctor` on a
fresh open of the base, and the base's chunk ids against a fresh ingest of the folder as it ends.
"""
import argparse, json, os, platform, random, shutil, statistics, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(BENCH)]
from scale import SHARED, TimedHashing, make_corpus, trainer   # noqa: E402  (bench/scale.py: corpus, embedder, trainer)

WORK = Path(os.environ.get("LKT_WATCH_DIR", "/tmp/lkt_watch_bench"))

READER = r"""
import json, sys, time
from pathlib import Path
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from scale import trainer
kt = trainer(Path(sys.argv[1]))
print(json.dumps({"ready": True, "generation": kt.generation}), flush=True)
def holds(c):
    hits = [x.source for x in kt.query(c["q"], k=3, mode="sparse", return_confidence=False).source_chunks]
    return (bool(hits) and hits[0] == c["source"]) if c["present"] else c["source"] not in hits
for line in sys.stdin:
    conds, t_end = json.loads(line), time.time() + 600
    while time.time() < t_end:
        kt.refresh()
        if all(holds(c) for c in conds): break
        time.sleep(0.01)
    print(json.dumps({"t": time.time(), "generation": kt.generation, "timed_out": time.time() >= t_end}), flush=True)
"""


class Reader:
    "A reader in another process: `until(conditions)` returns the wall time at which they all held."
    def __init__(self, persist: Path):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LKT_THREADS": "1"}
        self.p = subprocess.Popen([sys.executable, "-c", READER, str(persist), str(ROOT), str(BENCH)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)
        self.ready = json.loads(self.p.stdout.readline())

    def until(self, conds: list) -> dict:
        self.p.stdin.write(json.dumps(conds) + "\n"); self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        self.p.stdin.close(); self.p.wait(60)


def summary(xs: list) -> dict:
    return {"p50": round(statistics.median(xs), 3), "max": round(max(xs), 3), "trials": [round(x, 3) for x in xs]}


def probe_text(word: str) -> str:
    return (f"Probe note. The word {word} appears in this file only; it was written while the folder was watched, "
            "to time how long a reader of the base takes to find it.\n")


def settled(w) -> bool:
    "Nothing pending, no batch being written, and the state agrees with a stat of the folder."
    from local_knowledge_trainer.watch import changes
    if w.pending.paths or w.busy: return False
    with w._state_lock: known = dict(w.state["files"])
    return changes(known, w.filter.scan()) == ([], [])


def wait(cond, timeout: float = 1800):
    "Poll `cond` every 0.2 s (a light poll: the watcher's thread shares this interpreter) until it holds."
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end: raise TimeoutError("the watcher did not settle")
        time.sleep(0.2)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000, help="base size in chunks (default 100k)")
    ap.add_argument("--trials", type=int, default=5, help="trials of each of create, edit and delete (default 5)")
    ap.add_argument("--burst", type=int, default=1000, help="file events in the burst (default 1000: 50%% creates, 30%% edits, 20%% deletes)")
    ap.add_argument("--debounce", type=float, default=0.5); ap.add_argument("--max-delay", type=float, default=5.0)
    ap.add_argument("--poll", action="store_true", help="poll the folder instead of listening to file events")
    ap.add_argument("--out"); ap.add_argument("--keep", action="store_true", help=f"keep the corpus and bases in {WORK}")
    a = ap.parse_args(argv)
    if not SHARED.exists(): print(json.dumps({"skipped": f"{SHARED} not found"})); return
    import numpy as np, local_knowledge_trainer
    from local_knowledge_trainer.watch import FolderWatcher
    from local_knowledge_trainer.folder import generation_of
    shutil.rmtree(WORK, ignore_errors=True)
    corpus, base, fresh_base = WORK / "docs", WORK / "base", WORK / "fresh"
    t = time.perf_counter(); info = make_corpus(a.chunks, corpus); gen_s = time.perf_counter() - t
    (WORK / f"queries_{a.chunks}.json").unlink(missing_ok=True)
    out = {"bench": "watch", "chunks_asked": a.chunks, "corpus": {**info, "generate_s": round(gen_s, 1)},
           "stand_in_embedder": "scale.TimedHashing: signed CRC-32 feature hashing of the words into 384 dimensions",
           "settings": {"debounce_s": a.debounce, "max_delay_s": a.max_delay, "chunk_size_words": 80, "overlap": 0,
                        "build_graph": False, "tune_fusion": False, "warm": False, "vector_store": "auto"},
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
                       "lkt": local_knowledge_trainer.__version__}}
    kt = trainer(base)
    t = time.perf_counter(); r = kt.ingest(str(corpus)); out["initial_ingest"] = {"chunks": r.chunks, "documents": len(r.approved_docs),
                                                                                "wall_s": round(time.perf_counter() - t, 1)}
    out["vector_active"] = getattr(kt.vectors, "active", kt.vectors.kind)
    print(json.dumps(out), file=sys.stderr, flush=True)
    reader = Reader(base)
    src = lambda p: Path(os.path.relpath(p, base.parent)).as_posix()   # stored names: relative to the base's parent

    # the reference: today's way, `ingest(FOLDER, sync=True)` after a file is created, the reader timed the same way
    ref = []
    for i in range(3):
        f = corpus / f"ref{i}.txt"; word = f"refprobe{i}zq"
        f.write_text(probe_text(word), encoding="utf-8"); t0 = time.time()
        kt.ingest(str(corpus), sync=True)
        ref.append(reader.until([{"q": word, "source": src(f), "present": True}])["t"] - t0)
    for i in range(3): (corpus / f"ref{i}.txt").unlink()
    kt.ingest(str(corpus), sync=True)

    marks = []
    w = FolderWatcher(kt, [corpus], debounce=a.debounce, max_delay=a.max_delay, poll=a.poll,
                      on_batch=lambda b: marks.append((time.time(), b)))
    w.start(); wait(lambda: settled(w)); out["watch_mode"] = w.mode
    lat = {k: [] for k in ("create", "edit", "delete")}; pub = {k: [] for k in lat}; write = {k: [] for k in lat}
    def measure(kind, op, conds):
        n = len(marks); t0 = time.time(); op()
        got = reader.until(conds)
        if got["timed_out"]: raise TimeoutError(f"{kind}: the reader never saw it")
        wait(lambda: len(marks) > n and settled(w))
        t_pub, b = next((m for m in marks[n:] if m[1]["published"]), marks[-1])
        lat[kind].append(got["t"] - t0); pub[kind].append(t_pub - t0); write[kind].append(b["seconds"])
    for i in range(a.trials):
        f, w1, w2 = corpus / f"probe{i}.txt", f"watchprobe{i}zq", f"watchedited{i}zq"
        measure("create", lambda: f.write_text(probe_text(w1), encoding="utf-8"), [{"q": w1, "source": src(f), "present": True}])
        measure("edit", lambda: f.write_text(probe_text(w2) + "An edit made it longer.\n", encoding="utf-8"),
                [{"q": w2, "source": src(f), "present": True}, {"q": w1, "source": src(f), "present": False}])
        measure("delete", lambda: f.unlink(), [{"q": w2, "source": src(f), "present": False}])
    out["latency_s"] = {k: summary(v) for k, v in lat.items()}
    out["until_published_s"] = {k: summary(v) for k, v in pub.items()}
    out["batch_write_s"] = {k: summary(v) for k, v in write.items()}
    out["reference_ingest_sync_s"] = summary(ref)
    out["create_p50_vs_ingest_sync_p50"] = round(out["latency_s"]["create"]["p50"] / out["reference_ingest_sync_s"]["p50"], 3)
    reader.close()
    print(json.dumps({k: out[k] for k in ("latency_s", "reference_ingest_sync_s")}), file=sys.stderr, flush=True)

    # the burst: creates, edits and deletes in a seeded order, as fast as the disk takes them
    rng = random.Random(20270)
    docs = sorted(p for p in corpus.glob("d*.txt"))
    n_c, n_d = a.burst // 2, min(a.burst // 5, len(docs) // 2); n_e = a.burst - n_c - n_d
    gone = rng.sample(docs, n_d); kept = sorted(set(docs) - set(gone))
    edited = rng.sample(kept, n_e) if n_e <= len(kept) else rng.choices(kept, k=n_e)   # a small corpus: saved again
    ops = ([("create", corpus / "burst" / f"b{i:04d}.txt") for i in range(n_c)] + [("edit", p) for p in edited]
           + [("delete", p) for p in gone])
    rng.shuffle(ops)
    (corpus / "burst").mkdir()
    g0, c0, n0 = generation_of(base), dict(w.state["counts"]), len(marks)
    t0 = time.time()
    for kind, p in ops:
        if kind == "create": p.write_text(probe_text(f"burst{p.stem}zq") * 3, encoding="utf-8")
        elif kind == "edit":
            with open(p, "a", encoding="utf-8") as fh: fh.write(" An appended sentence marks this edit.\n")
        else: p.unlink()
    t_ops = time.time() - t0
    wait(lambda: settled(w) and len(marks) > n0)
    t_done = max(m[0] for m in marks[n0:]) - t0
    c1 = w.state["counts"]
    out["burst"] = {"events": len(ops), "creates": n_c, "edits": n_e, "edited_files": len(set(edited)), "deletes": n_d, "writing_the_files_s": round(t_ops, 2),
                    "until_last_publish_s": round(t_done, 2), "batches": c1["batches"] - c0["batches"],
                    "publishes": generation_of(base) - g0,
                    **{k: c1[k] - c0[k] for k in ("ingested", "unchanged", "removed", "errors")}}
    w.stop(); kt.close()
    print(json.dumps(out["burst"]), file=sys.stderr, flush=True)

    # doctor on a fresh open, and the chunk ids against a fresh ingest of the folder as it is now
    doc_kt = trainer(base); t = time.perf_counter(); d = doc_kt.doctor(); doc_kt.close(); out["doctor"] = {"status": d["status"], "seconds": round(time.perf_counter() - t, 1),
                                                                         "failed": [c for c in d["checks"] if not c["ok"]]}
    watched = trainer(base); ids = sorted(watched.store.chunk_ids()); vec = sorted(watched.vectors.ids()); watched.close()
    fr = trainer(fresh_base); t = time.perf_counter(); fr.ingest(str(corpus)); fresh_s = time.perf_counter() - t
    fids = sorted(fr.store.chunk_ids()); fr.close()
    out["after_burst"] = {"chunks": len(ids), "chunk_ids_equal_fresh_ingest": ids == fids, "vector_ids_equal_chunk_ids": vec == ids,
                          "fresh_ingest_s": round(fresh_s, 1), "fresh_chunks": len(fids)}
    out["loadavg_1min_at_end"] = round(os.getloadavg()[0], 1)
    if not a.keep: shutil.rmtree(WORK, ignore_errors=True)
    s = json.dumps(out, indent=1)
    if a.out: Path(a.out).write_text(s + "\n")
    print(s)


if __name__ == "__main__":
    main()
