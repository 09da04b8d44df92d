"""Re-ingesting an unchanged folder: files recognised by size and mtime (nothing read) against files whose mtime moved
(each read, parsed and hashed: what every re-ingest did before); prints JSON.

Usage: .venv/bin/python bench/reingest.py [--files 1000] [--out bench/measured/reingest.json]
The folder holds `--files` text files of real sentences from ../shared/data/{cisi,cacm,pt_faquad,zh_cmrc2018_dev}
(title + text of one corpus record each, in corpus order), embedded with the hashing test double (the embedder is not
what is measured). The same run times both, so the ratio compares like with like.
"""
import argparse, json, os, shutil, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
NAMES = ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")


def corpus(folder: Path, n: int) -> int:
    "Write n files, each one record of the shared collections (round robin); returns the bytes written."
    recs = {k: [json.loads(l) for l in open(SHARED / k / "corpus.jsonl", encoding="utf-8")] for k in NAMES}
    total = 0
    for i in range(n):
        k = NAMES[i % len(NAMES)]; d = recs[k][(i // len(NAMES)) % len(recs[k])]
        text = f"{d.get('title', '')}\n\n{d.get('text', '')}\n"
        p = folder / k / f"r{i:05d}.txt"; p.parent.mkdir(parents=True, exist_ok=True); p.write_text(text, encoding="utf-8")
        total += len(text.encode())
    return total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000); ap.add_argument("--out")
    a = ap.parse_args(argv)
    if not SHARED.exists(): print(json.dumps({"skipped": f"{SHARED} not found"})); return
    from local_knowledge_trainer import KnowledgeTrainer
    from local_knowledge_trainer.embeddings import HashingEmbedder
    td = Path(tempfile.mkdtemp(prefix="lkt-reingest-"))
    try:
        folder = td / "docs"; nbytes = corpus(folder, a.files)
        kt = KnowledgeTrainer(embedding_model=HashingEmbedder(384), persist_dir=td / "kb", vector_store="numpy",
                              build_graph=False, tune_fusion=False, warm=False, show_progress=False)
        t = time.perf_counter(); r0 = kt.ingest(str(folder)); first = time.perf_counter() - t
        runs = []
        for _ in range(3):
            t = time.perf_counter(); r = kt.ingest(str(folder)); runs.append(time.perf_counter() - t)
        assert len(r.unchanged) == a.files and r.chunks == 0, r
        touched = []
        for j in range(3):
            for p in folder.rglob("*.txt"): os.utime(p, ns=(time.time_ns() + j + 1, time.time_ns() + j + 1))
            t = time.perf_counter(); r = kt.ingest(str(folder)); touched.append(time.perf_counter() - t)
            assert len(r.unchanged) == a.files and r.chunks == 0, r
        kt.close()
        best, ref = min(runs), min(touched)
        out = {"bench": "reingest", "files": a.files, "bytes": nbytes, "chunks": r0.chunks, "first_ingest_s": round(first, 2),
               "unchanged_by_size_and_mtime_s": [round(x, 3) for x in runs],
               "mtime_moved_read_and_hashed_s": [round(x, 3) for x in touched],
               "speedup_best_of_3": round(ref / best, 1), "cpus": os.cpu_count(),
               "loadavg_1min_at_end": round(os.getloadavg()[0], 1)}
    finally: shutil.rmtree(td, ignore_errors=True)
    s = json.dumps(out, indent=1)
    if a.out: Path(a.out).write_text(s + "\n")
    print(s)


if __name__ == "__main__": main()
