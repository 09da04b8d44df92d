"""A live base at scale: how long a change takes to reach a reader, what a publish writes, open + first query (JSON on stdout).

Runs on a base `bench/scale.py --keep` left in $LKT_SCALE_DIR (real text from the shared collections, the stand-in
embedder of bench/scale.py, the same trainer settings): base_N/ and corpus_N/.

- **reader**: a separate process (`--reader`) opens the base (open + first query timed), then, told a marker text and
  whether it must appear or vanish, refreshes and queries every 20 ms until it does, and reports the wall-clock time
  (`time.time`, one machine) it first saw it.
- **writer** (this process): for each trial, writes a document (new, edited or removed) and tells the reader at the
  moment the write starts; the latency is the reader's time seen minus that start: the write, its publish, the reader's
  reload and its query, as a user of a live base meets them.
- `remove_sources` of three documents: generations before and after (one publish).
- per publish: the bytes of the files it wrote (new or changed names in the manifest) against the whole generation.
- a merge (`merge()` of the vectors' tail and BM25's, then a publish): its time, written in full.

    python bench/live.py --n 1000000 --out bench/measured/live_1m.json
"""
import argparse, importlib.util, json, os, select, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("scale", ROOT / "bench" / "scale.py"); scale = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scale)
WORK = scale.WORK


def reader(persist: Path):
    "The reader process: open, first query, then answer 'wait' commands from stdin with the time the change was seen."
    t0 = time.perf_counter(); kt = scale.trainer(persist); t_open = time.perf_counter() - t0
    t = time.perf_counter(); kt.query("solar energy storage", k=10, return_confidence=False); t_first = time.perf_counter() - t
    print(json.dumps({"open_s": round(t_open, 2), "first_query_s": round(t_first, 3),
                      "open_plus_first_query_s": round(t_open + t_first, 2), "peak_rss_mb": round(scale.peak_rss_mb())}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("stop"): break
        deadline, polls, reloads, shared = time.time() + cmd.get("timeout", 300), 0, 0, None
        while time.time() < deadline:
            graph = getattr(getattr(kt.vectors, "inner", kt.vectors), "index", None)
            t = time.perf_counter(); reloaded = kt.refresh(); t_reload = time.perf_counter() - t
            if reloaded: shared = graph is not None and graph is getattr(getattr(kt.vectors, "inner", kt.vectors), "index", None)
            reloads += reloaded
            hits = kt.query(cmd["text"], k=10, mode="sparse", return_confidence=False)
            polls += 1
            seen = any(cmd["marker"] in c.text for c in hits.source_chunks)
            if seen == (cmd["want"] == "present"):
                print(json.dumps({"seen_at": time.time(), "polls": polls, "reloads": reloads,
                                  "last_reload_s": round(t_reload, 3), "graph_shared": shared,
                                  "generation": kt.generation}), flush=True)
                break
            time.sleep(0.02)
        else: print(json.dumps({"timeout": True, "polls": polls}), flush=True)
    print(json.dumps({"peak_rss_mb": round(scale.peak_rss_mb())}), flush=True)


def written_bytes(before: dict, after: dict, folder: Path) -> int:
    "Bytes of the files a publish wrote: names new in the manifest or whose hash changed."
    return sum((folder / n).stat().st_size for n, h in after["files"].items() if before["files"].get(n) != h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000); ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--reader", type=Path); ap.add_argument("--out")
    a = ap.parse_args()
    if a.reader: reader(a.reader); return
    from local_knowledge_trainer.folder import read_manifest
    persist, corpus = WORK / f"base_{a.n}", WORK / f"corpus_{a.n}"
    if not (persist / "vector_store").exists():
        print(json.dumps({"skipped": f"{persist}: no base (run bench/scale.py --sizes {a.n} --keep first)"})); return
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "LKT_THREADS": "1"}
    rd = subprocess.Popen([sys.executable, __file__, "--reader", str(persist)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, env=env)
    res = {"bench": "live", "n": a.n, "settings": "bench/scale.py's trainer: stand-in embedder, build_graph=False, warm=False",
           "reader_open": json.loads(rd.stdout.readline())}
    t = time.perf_counter(); kt = scale.trainer(persist); res["writer_open_s"] = round(time.perf_counter() - t, 2)
    docs = sorted(corpus.glob("*.txt"))
    run = f"r{os.getpid()}"   # markers no earlier run left in the corpus

    def trial(kind: str, j: int) -> dict:
        marker = f"zqmarker{kind}{j}x{run}"
        want = "absent" if kind == "remove" else "present"
        m0 = read_manifest(persist)
        if kind == "new": path = corpus / f"live_{j:04d}.txt"; text = f"A new note {j}: {marker} about solar storage."
        elif kind == "edit": path = docs[j]; text = path.read_text(encoding="utf-8") + f"\n\nAn edit adds {marker} here."
        else:
            path = corpus / f"live_{j:04d}.txt"   # one made by a 'new' trial: its marker must vanish
            marker = f"zqmarkernew{j}x{run}"
        rd.stdin.write(json.dumps({"text": marker, "marker": marker, "want": want}) + "\n"); rd.stdin.flush()
        t0 = time.time(); p0 = time.perf_counter()
        if kind == "remove": kt.remove(str(path)); path.unlink()
        else: path.write_text(text, encoding="utf-8"); kt.ingest(str(path))
        write_s = time.perf_counter() - p0
        seen = json.loads(rd.stdout.readline())
        m1 = read_manifest(persist)
        return {"kind": kind, "write_s": round(write_s, 3), "visible_s": round(seen["seen_at"] - t0, 3) if "seen_at" in seen else None,
                "reader_reload_s": seen.get("last_reload_s"), "graph_shared": seen.get("graph_shared"), "polls": seen.get("polls"),
                "generation": m1["generation"], "written_mb": round(written_bytes(m0, m1, persist / "vector_store") / 2**20, 2),
                "generation_mb": round(sum((persist / "vector_store" / n).stat().st_size for n in m1["files"]) / 2**20)}

    rows = [trial(k, j) for j in range(a.trials) for k in ("new", "edit", "remove")]
    res["trials"] = rows
    for k in ("new", "edit", "remove"):
        v = sorted(r["visible_s"] for r in rows if r["kind"] == k and r["visible_s"] is not None)
        res[f"{k}_visible_s"] = {"p50": v[len(v) // 2] if v else None, "max": v[-1] if v else None}
    srcs = kt.sources()[-3:]
    g0 = kt.generation; t = time.perf_counter(); kt.remove_sources(srcs); res["remove_three"] = {
        "generations": kt.generation - g0, "seconds": round(time.perf_counter() - t, 2)}
    m0 = read_manifest(persist); t = time.perf_counter()
    merged = kt.merge_segments()
    m1 = read_manifest(persist)
    res["merge"] = {"seconds": round(time.perf_counter() - t, 1), **merged,
                    "written_mb": round(written_bytes(m0, m1, persist / "vector_store") / 2**20)}
    rd.stdin.write(json.dumps({"stop": True}) + "\n"); rd.stdin.flush()
    res["reader_peak_rss_mb"] = json.loads(rd.stdout.readline())["peak_rss_mb"]; rd.wait(timeout=60)
    res["writer_peak_rss_mb"] = round(scale.peak_rss_mb())
    res["disk_mb"] = round(scale.du(persist) / 2**20)
    kt.close()
    s = json.dumps(res, indent=1)
    if a.out: Path(a.out).write_text(s + "\n")
    print(s)


if __name__ == "__main__":
    main()
