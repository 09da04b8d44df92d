"""Reliability figures: the kill loop with 100 SIGKILLs, and peak RSS and time for large text files; prints ONE JSON object.

kill_loop  `tests/test_reliability.py::kill_loop`: a base holding data (20 files), a child process (forked from a zygote that
           imported LKT once) ingesting a new batch (30 files) is SIGKILLed at a seeded random moment over the ingest's
           measured duration; after each kill a reader opens the base (it must not write), doctor runs, the store must hold
           the old or the new state, every earlier chunk must be found by a text search of its own words, and the next
           writer's rerun must leave SQLite, vectors and both manifests agreeing with doctor ok and no leftover folders.
           `survived` counts kills after which all of that held; `problems` groups what did not, by kind.
large      one subprocess per file and phase: `DocumentParser.parse_file` alone, then `KnowledgeTrainer.ingest` of the same
           file into a fresh base (parse, chunk, embed, SQLite + FTS5, FAISS, BM25, publish), with `ru_maxrss` (peak RSS)
           and the RSS after the imports. Files: a 10 MB single-line text (words, no newline), a 10 MB single line without
           any whitespace, a 50 MB text of paragraphs. Embedding is the HashingEmbedder test double (no model), so the
           figures are LKT's own cost; a real model adds its encode time per chunk.

  .venv/bin/python bench/reliability.py [--kills 100] [--skip-large] [--skip-kills] [--no-save]

Also written to bench/measured/reliability.json (unless --no-save).
"""
import argparse, importlib.util, json, os, platform, random, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def log(*a): print(*a, file=sys.stderr, flush=True)


def reliability_tests():
    "tests/test_reliability.py as a module (its kill_loop and Zygote)."
    name = "lkt_test_reliability"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "test_reliability.py")
        mod = importlib.util.module_from_spec(spec); sys.modules[name] = mod; spec.loader.exec_module(mod)
    return sys.modules[name]


MEASURE = r'''
import json, resource, sys, time
from pathlib import Path
def rss_mb(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
def cur_mb():
    for l in open("/proc/self/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1]) / 1024
phase, path, persist = sys.argv[1], sys.argv[2], sys.argv[3]
from local_knowledge_trainer.parser import DocumentParser
from local_knowledge_trainer.trainer import KnowledgeTrainer
from local_knowledge_trainer.embeddings import HashingEmbedder
import local_knowledge_trainer.index, faiss, scipy.sparse
base = cur_mb()
t = time.perf_counter()
if phase == "parse":
    d = DocumentParser().parse_file(path)
    out = {"status": d.status, "reason": d.reason, "chunks": len(d.chunks)}
else:
    kt = KnowledgeTrainer(embedding_model=HashingEmbedder(64), persist_dir=persist, build_graph=False, tune_fusion=False,
                          show_progress=False)
    r = kt.ingest(path)
    out = {"approved": len(r.approved_docs), "errors": r.errors, "skipped": r.skipped, "chunks": r.chunks,
           "stored_chunks": kt.store.count_chunks(), "vectors": len(kt.vectors)}
    kt.close()
out.update(seconds=round(time.perf_counter() - t, 2), peak_rss_mb=round(rss_mb(), 1), rss_after_imports_mb=round(base, 1))
print(json.dumps(out))
'''


def write_large(d:Path) -> dict:
    "The large files; returns {label: path}."
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10))) for _ in range(20000)]
    def text(n_bytes, sep=" "):
        out, size = [], 0
        while size < n_bytes:
            w = rng.choice(words); out.append(w); size += len(w) + len(sep)
        return sep.join(out)
    files = {}
    p = d / "single_line_10mb.txt"; p.write_text(text(10_000_000), encoding="utf-8"); files["10mb_single_line"] = p
    p = d / "no_whitespace_10mb.txt"; p.write_text(text(10_000_000, sep=""), encoding="utf-8"); files["10mb_single_line_no_whitespace"] = p
    p = d / "text_50mb.txt"
    with open(p, "w", encoding="utf-8") as f:
        size = 0
        while size < 50_000_000:
            para = text(rng.randint(300, 1500)) + "\n\n"; f.write(para); size += len(para)
    files["50mb_text"] = p
    return files


def measure_large(tmp:Path, timeout:float=1800) -> dict:
    files, out = write_large(tmp), {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for label, path in files.items():
        row = {"bytes": path.stat().st_size}
        for phase in ("parse", "ingest"):
            log(f"large: {label} {phase} …")
            t = time.perf_counter()
            try:
                p = subprocess.run([sys.executable, "-c", MEASURE, phase, str(path), str(tmp / f"kb_{label}")], capture_output=True,
                                   text=True, timeout=timeout, env=env, cwd=str(ROOT))
                row[phase] = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else \
                    {"returncode": p.returncode, "stderr": p.stderr[-1500:]}
            except subprocess.TimeoutExpired: row[phase] = {"timeout_s": timeout}
            row[phase]["wall_s"] = round(time.perf_counter() - t, 2)
            log(f"  {json.dumps(row[phase])[:300]}")
        out[label] = row
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--skip-kills", action="store_true")
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    res = {"bench": "reliability", "python": platform.python_version(), "cpus": os.cpu_count(),
           "embedder": "HashingEmbedder(64) test double: no model load, no model encode time",
           "trainer": "build_graph=False, tune_fusion=False, vector_store=faiss"}
    with tempfile.TemporaryDirectory(prefix="lkt_rel_") as tmp:
        tmp = Path(tmp)
        if not a.skip_kills:
            t = time.perf_counter()
            (tmp / "kills").mkdir()
            res["kill_loop"] = reliability_tests().kill_loop(a.kills, tmp / "kills", log=log)
            res["kill_loop"]["elapsed_s"] = round(time.perf_counter() - t, 1)
            log(json.dumps(res["kill_loop"])[:600])
        if not a.skip_large:
            (tmp / "large").mkdir()
            res["large"] = measure_large(tmp / "large")
    s = json.dumps(res)
    print(s)
    if not a.no_save:
        (ROOT / "bench" / "measured").mkdir(exist_ok=True)
        (ROOT / "bench" / "measured" / "reliability.json").write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
