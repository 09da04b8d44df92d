"""Ray ingest throughput per worker, against the local path on the same real chunks, and their equality; prints one JSON object.

For each model (--models: `en` = KnowledgeTrainer(language="en"), all-MiniLM-L6-v2, on the English BEIR collections cisi
then cacm; `pt` = KnowledgeTrainer(language="pt"), multilingual-e5-small on LKT's int8 engine, on pt_faquad; `pt-en` =
the same Portuguese trainer and model on the English chunks, a larger sample of that model's rate) the documents of
../shared/data/<collection>/corpus.jsonl are written as text files (title, blank line, text) to a temporary folder,
in corpus order, until their chunks (the trainer's own parser and chunking) reach --chunks. A collection with fewer
chunks than asked gives what it has (`chunks_available`): nothing is padded, repeated or generated.

On the same folder, in this one run:
  local          `kt.ingest(folder, engine="local")`: the reference; the embedder's threads are `fastest_threads`' cached
                 pick for this machine (the product's default), model loaded and the store warmed before the clock;
  ray, W workers `kt.ingest(folder, engine="ray")` on a local Ray started by the package's own `cluster._start_ray(num_cpus=W+1)`:
                 `default_actors` then gives W embedding actors (one thread each: `EmbedActor`) and keeps 1 CPU slot
                 for parsing. Ray's start is timed apart (`ray_start_s`); actor start and model load are inside the
                 ingest (`first_document_s` is the time to the first document back from the cluster).
Per run: wall seconds, chunks, passages/s overall and per worker, the steady rate (`steady`: the chunks delivered after
the first 20% of the folder's, over the time from then to the end of the ingest: Ray's actor start, model load and
pipeline fill excluded, the last commit and the publish included; `reliable` from 500 such chunks, as Ray delivers
in blocks; the local path's is its overall rate: nothing to exclude. Caveat, seen at 10k chunks: the head regroups
rows per file in input order, so files reach the writer in bursts after minutes of embedding and `steady` can
overstate the rate (67/s on 2 workers against 27/s overall): prefer the overall rate on large folders), the ratios
to the local path, the load average
before and after. `equality` compares each Ray base with the
local base: chunk ids (sorted) equal, and the max absolute difference of their stored vectors (the issue asks <= 1e-6).
--equal-chunks N different from --chunks checks equality on a folder of its own (local and Ray at the largest worker
count). The entity graph and fusion tuning are off in every run (build_graph=False, tune_fusion=False): both are the
same work on either engine, after the ingest.

  PYTHONPATH=/tmp/raypkgs nice -n 19 .venv/bin/python bench/ray_scale.py --chunks 2500 --workers 1 2 --models en pt pt-en \
      --out bench/measured/ray_scale.json           # ~17 min on 2 loaded cores; the issue's sizes: --chunks 100000 --equal-chunks 10000
  PYTHONPATH=/tmp/raypkgs .venv/bin/python bench/ray_scale.py --equal-only --equal-chunks 10000 --workers 2 --text scale \
      --models en pt --out bench/measured/ray_equal_10k.json   # equality alone on 10k chunks of scale.py's documents
  PYTHONPATH=/tmp/raypkgs .venv/bin/python bench/ray_scale.py --state /tmp/lkt_ray100k --chunks 100000 --workers 2 1 \
      --text scale --models en pt --out bench/measured/ray_scale_100k.json   # resumable: run again to go on
--state DIR makes the throughput runs resumable across sessions (a 100k-chunk configuration is 1-2.5 h on 2 cores): the
folders and the Ray bases live in DIR, and each run goes on with each configuration's ingest where the last one stopped
(the trainer's own skip of unchanged files: not even opened). Every piece of an ingest is logged in DIR/pieces.json
with a heartbeat (a thread rewrites it atomically every 10 s); a piece killed mid-run counts the chunks its base
committed (the next piece's count minus its own start count) over the time to its last heartbeat: the work it lost
(the uncommitted batch) is in the time and not in the chunks, and at most 10 s of its time is missed.
--state DIR --report prints the JSON of the pieces so far without running anything (a configuration's last piece,
running or killed, counts the chunks its base has committed by then over its last heartbeat: `committed_at_report`, a
lower bound while it runs, as the count lags by up to one commit batch). --earlier FILE adds an earlier machine's report
(/tmp and the bases do not outlive a machine): its complete configurations are kept as they are, and its unfinished
pieces are listed with `lost` and left out of the sums (their base is gone, the configuration runs again from 0 here).
The JSON sums the pieces per configuration: chunks over wall, start-up included (`startup_s`: each piece's time to
its first new document back, which holds Ray's actors, the model load and the pass over unchanged files, but also
embedding: the writer receives whole files in input order, in bursts, so no rate after it is derived from it; at 100k
chunks it is a small share of the wall, `startup_share`). No local reference runs in this mode: the local rate and
the equality are the 10k check's.
--text scale stages bench/scale.py's documents (real sentences of the four shared collections, content-seeded) instead
of the collections' own documents, which hold only 4,851 English and 249 Portuguese chunks.
"""
import argparse, json, os, platform, re, shutil, sys, tempfile, threading, time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false"); os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
STEADY_FROM = 0.2   # the steady rate counts the chunks after this share of the folder's
STEADY_MIN = 500    # ... and is marked reliable from this many chunks on (Ray delivers in blocks; a short stream bursts)
MODELS = {"en": ("en", ("cisi", "cacm")), "pt": ("pt", ("pt_faquad",)), "pt-en": ("pt", ("cisi", "cacm"))}


def log(*a): print(*a, file=sys.stderr, flush=True)
def load(): return [round(x, 2) for x in os.getloadavg()]


def cpu() -> dict:
    "The CPU a rate was measured on (rates differ by machine: compare workers on one machine, never across machines)."
    from local_knowledge_trainer.e5 import int8_kernel
    names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(errors="replace"), re.M) if Path("/proc/cpuinfo").exists() else []
    return {"cpu_model": names[0] if names else platform.processor(), "int8_kernel": int8_kernel()}


def trainer(persist: Path, language: str):
    from local_knowledge_trainer import KnowledgeTrainer
    return KnowledgeTrainer(language=language, persist_dir=str(persist), build_graph=False, tune_fusion=False, warm=False,
                            show_progress=False)


def file_name(collection: str, doc: dict) -> str:
    return f"{collection}_{re.sub(r'[^A-Za-z0-9_.-]', '_', str(doc['_id']))}.txt"


def stage_documents(collections, d: Path) -> list:
    "Every document of the collections as a text file in d, in corpus order: [(collection, path)]."
    d.mkdir(parents=True, exist_ok=True); out = []
    for c in collections:
        with open(SHARED / c / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                doc = json.loads(line)
                text = (doc.get("title", "") + "\n\n" + doc.get("text", "")).strip()
                p = d / file_name(c, doc)
                p.write_text(text, encoding="utf-8"); out.append((c, p))
    return out


def stage_scale(n_chunks: int, staged: Path, factor: int = 3) -> list:
    "bench/scale.py's documents of real sentences of the shared collections (content-seeded), factor x n_chunks of its chunks: [(source, path)]."
    sys.path.insert(0, str(ROOT / "bench"))
    from scale import make_corpus
    # a scale.py chunk is CHUNK_WORDS words; the trainer's chunks are longer (cut at the model's window): make_folder
    # doubles the factor until the trainer's chunks reach n_chunks
    make_corpus(factor * n_chunks, staged)
    return [("scale", p) for p in sorted(staged.iterdir())]


def make_folder(key: str, n_chunks: int, tmp: Path, parser, text: str = "collections") -> dict:
    "A folder of the model's collections' first documents (or scale.py's) holding >= n_chunks chunks (all there are if fewer)."
    _, colls = MODELS[key]
    if text == "scale":
        colls, factor = ("scale.py: " + ", ".join(("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev")),), 3
        while True:   # the trainer's chunks are longer than scale.py's (a larger window: fewer of them): stage more
            files = stage_scale(n_chunks, tmp / f"staged_scale_{n_chunks}_x{factor}", factor)
            counts = [len(d.chunks) for d in parser.parse_files([(p, p.name) for _, p in files])]
            if sum(counts) >= n_chunks or factor >= 48: break
            factor *= 2
    else:
        staged = tmp / f"staged_{'_'.join(colls)}"
        files = stage_documents(colls, staged) if not staged.exists() else stage_order(colls, staged)
        counts = [len(d.chunks) for d in parser.parse_files([(p, p.name) for _, p in files])]
    available = sum(counts)
    folder = tmp / f"corpus_{key}_{n_chunks}"; folder.mkdir(exist_ok=True)
    got, used = 0, {}
    for (c, p), n in zip(files, counts):
        if got >= n_chunks: break
        if not n: continue
        shutil.copy(p, folder / p.name); got += n; used[c] = used.get(c, 0) + 1
    docs = list(parser.parse(folder))   # the order the trainer reads them in (list_files): chunks per document
    chunks = [c for d in docs for c in d.chunks]
    return {"folder": folder, "per_document": [len(d.chunks) for d in docs], "collections": list(colls), "documents": used, "chunks_asked": n_chunks,
            "chunks_available": available, "chunks": len(chunks),
            "mean_chunk_chars": round(sum(len(c.text) for c in chunks) / max(len(chunks), 1), 1),
            **({"short": f"{'+'.join(colls)} has {available} chunks with this chunking, fewer than the {n_chunks} asked: all of them are used"}
               if available < n_chunks else {})}


def stage_order(colls, staged: Path) -> list:
    "The staged files in corpus order (collection by collection, line order), whatever the file system's order."
    out = []
    for c in colls:
        with open(SHARED / c / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                out.append((c, staged / file_name(c, json.loads(line))))
    return out


def timed_ingest(folder: Path, persist: Path, language: str, engine: str, per_document: list) -> dict:
    "One cold ingest of folder into a new base: wall, chunks, time to the first document, steady rate, load before and after."
    kt = trainer(persist, language)
    marks = []   # (time, documents delivered): the ingest's parse events, one per document as it reaches the writer
    def progress(stage, done, total):
        if stage == "parse" and done: marks.append((time.perf_counter(), done))
    la0 = load(); t0 = time.perf_counter()
    r = kt.ingest(str(folder), engine=engine, progress=progress)
    t_end = time.perf_counter(); wall = t_end - t0
    # steady rate: the chunks delivered after the first STEADY_FROM of them, over the time from then to the ingest's end
    # (excludes Ray's actor start, model load and pipeline fill; the last commit and the publish stay in)
    # The local path has no start-up inside the clock (model loaded, store warmed) and parses a whole commit batch
    # (INGEST_BATCH chunks) before embedding it, so its parse events do not time delivery: its steady rate is its overall.
    cum, steady = [0], None
    for n in per_document: cum.append(cum[-1] + n)
    if engine == "local":
        steady = {"from_s": 0.0, "chunks": r.chunks, "passages_per_s": round(r.chunks / wall, 2), "reliable": r.chunks >= STEADY_MIN,
                  "rule": "local: the overall rate (nothing to exclude)"}
    for t, done in (marks if engine != "local" else []):
        if cum[min(done, len(cum) - 1)] >= STEADY_FROM * cum[-1]:
            steady = {"from_s": round(t - t0, 2), "chunks": cum[-1] - cum[min(done, len(cum) - 1)],
                      "passages_per_s": round((cum[-1] - cum[min(done, len(cum) - 1)]) / max(t_end - t, 1e-9), 2)}
            steady["reliable"] = steady["chunks"] >= STEADY_MIN
            break
    out = {"engine": engine, "wall_s": round(wall, 2), "chunks": r.chunks, "documents": len(r.approved_docs),
           "errors": len(r.errors), "skipped": len(r.skipped), "passages_per_s": round(r.chunks / wall, 2),
           "first_document_s": round(marks[0][0] - t0, 2) if marks else None,
           "steady": steady,
           "load_before": la0, "load_after": load(), "model": kt.embedder.name}
    if engine == "local": out["threads"] = kt.embedder.threads
    kt.close()
    return out


def equality(local_persist: Path, ray_persist: Path, language: str) -> dict:
    "Chunk ids and stored vectors of two bases of the same folder."
    import numpy as np
    kl, kr = trainer(local_persist, language), trainer(ray_persist, language)
    try:
        il, ir = sorted(kl.store.chunk_ids()), sorted(kr.store.chunk_ids())
        out = {"chunks_local": len(il), "chunks_ray": len(ir), "chunk_ids_equal": il == ir}
        common = sorted(set(il) & set(ir))
        if common:
            d = np.abs(kl.kb.vectors_of(common) - kr.kb.vectors_of(common)).max(axis=1)
            out.update(compared=len(common), max_abs_vector_diff=float(d.max()), median_max_abs_diff=float(np.median(d)),
                       chunks_over_1e6=int((d > 1e-6).sum()), chunks_over_1e5=int((d > 1e-5).sum()),
                       chunks_over_1e4=int((d > 1e-4).sum()), within_1e6=bool(d.max() <= 1e-6))
        return out
    finally: kl.close(); kr.close()


def warm_up(key: str, tmp: Path, folder: Path) -> dict:
    "Load the model, resolve its threads, and run a 3-document local ingest (first-use costs of store, BM25, vectors)."
    language, _ = MODELS[key]
    w = tmp / f"warm_{key}"; w.mkdir()
    for p in sorted(folder.iterdir())[:3]: shutil.copy(p, w / p.name)
    kt = trainer(tmp / "bases" / f"warm_{key}", language)
    t = time.perf_counter(); kt.embedder.backend.load(); threads = kt.embedder.threads; kt.ingest(str(w)); kt.close()
    return {"warm_up_s": round(time.perf_counter() - t, 2), "local_threads": threads}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000, help="chunks per configuration (the issue's size: 100k)")
    ap.add_argument("--equal-chunks", type=int, default=None, help="chunks of the equality check (default: the --chunks folder)")
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2], help="embedding actors of the local Ray")
    ap.add_argument("--models", nargs="*", default=["en", "pt"], choices=list(MODELS))
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--note", default=None, help="a note recorded in the JSON")
    ap.add_argument("--text", choices=["collections", "scale"], default="collections",
                    help="the documents: the model's BEIR collections, or bench/scale.py's documents of their sentences (any size)")
    ap.add_argument("--equal-only", action="store_true", help="only the equality check (--equal-chunks) at the largest worker count")
    ap.add_argument("--state", default=None, help="resumable Ray throughput runs kept in this folder (no local reference, no equality)")
    ap.add_argument("--report", action="store_true", help="with --state: the JSON of the pieces so far; nothing runs")
    ap.add_argument("--earlier", default=None, help="with --report: an earlier --report JSON whose machine (and bases) are gone: "
                    "its complete configurations are kept, its unfinished pieces are listed as lost and not counted")
    a = ap.parse_args()
    if a.state: return resumable(a)
    import ray
    from local_knowledge_trainer.cluster import _start_ray, default_actors, _object_store_bytes
    from local_knowledge_trainer.parser import DocumentParser
    t_all = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="lkt-bench-ray-"))
    out = {"bench": "ray_scale", "command": " ".join(["bench/ray_scale.py", *sys.argv[1:]]),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__,
                       "platform": platform.platform(), **cpu(), "load_start": load()},
           "workers": a.workers, "note": a.note,
           "worker": ("one Ray embedding actor (EmbedActor: 1 CPU, 1 thread); a local Ray of W+1 CPUs gives W actors by "
                      "default_actors and 1 slot to parse tasks; the driver (the trainer: SQLite, BM25, vectors) runs "
                      "outside them, all on this machine's cores"),
           "models": {}}
    not_run = [f"{n:,} chunks ({what}): not run here, {a.chunks if what == 'throughput' else (a.equal_chunks or a.chunks):,} instead"
               for n, what in ((100_000, "throughput"), (10_000, "equality"))
               if (a.chunks if what == "throughput" else (a.equal_chunks or a.chunks)) < n]
    if not_run: out["sizes_not_run"] = not_run
    try:
        (tmp / "bases").mkdir()
        folders, eq_folders = {}, {}
        for key in a.models:
            language, _ = MODELS[key]
            kt = trainer(tmp / "bases" / f"probe_{key}", language)   # the trainer's own parser: chunking and the model's window
            parser = DocumentParser(chunk_size=kt.chunk_size, chunk_overlap=kt.chunk_overlap, **kt.embedder.window_args)
            folders[key] = make_folder(key, a.equal_chunks if a.equal_only else a.chunks, tmp, parser, a.text)
            if a.equal_only or (a.equal_chunks and a.equal_chunks != a.chunks):
                eq_folders[key] = folders[key] if a.equal_only else make_folder(key, a.equal_chunks, tmp, parser, a.text)
            kt.close()
            m = out["models"][key] = {"language": language, "model": kt.embedder.name,
                                      **{k: v for k, v in folders[key].items() if k not in ("folder", "per_document")}, "runs": {}}
            m.update(warm_up(key, tmp, folders[key]["folder"]))
            log(f"== {key}: {m['chunks']} chunks ({m['chunks_available']} available), local threads {m['local_threads']}")
        for key in ([] if a.equal_only else a.models):   # the local reference first, with no Ray running
            language, _ = MODELS[key]
            log(f"   {key}: local")
            out["models"][key]["runs"]["local"] = timed_ingest(folders[key]["folder"], tmp / "bases" / f"{key}_local", language, "local",
                                                                folders[key]["per_document"])
            log(f"     {out['models'][key]['runs']['local']}")
        for w in ([max(a.workers)] if a.equal_only else a.workers):
            la0 = load(); t = time.perf_counter()
            _start_ray(num_cpus=w + 1)
            start_s = time.perf_counter() - t
            res = ray.cluster_resources()
            cluster = {"ray_start_s": round(start_s, 2), "num_cpus": w + 1, "cluster_cpus": res.get("CPU"),
                       "actors": default_actors(res), "object_store_mib": round(_object_store_bytes() / 2**20),
                       "load_before_start": la0}
            assert cluster["actors"] == w, cluster
            log(f"-- Ray with {w} worker(s): started in {start_s:.1f} s, {res}")
            try:
                for key in a.models:
                    language, _ = MODELS[key]
                    if a.equal_only:
                        f = eq_folders[key]
                        e = {k: v for k, v in f.items() if k not in ("folder", "per_document")}
                        log(f"   {key}: equality on {e['chunks']} chunks, local then ray with {w} worker(s)")
                        e["local"] = timed_ingest(f["folder"], tmp / "bases" / f"{key}_eq_local", language, "local", f["per_document"])
                        e["ray"] = timed_ingest(f["folder"], tmp / "bases" / f"{key}_eq_ray{w}", language, "ray", f["per_document"])
                        e["ray"]["cluster"] = cluster
                        e["equality"] = equality(tmp / "bases" / f"{key}_eq_local", tmp / "bases" / f"{key}_eq_ray{w}", language)
                        out["models"][key]["equal_check"] = e; log(f"     {e['equality']}")
                        continue
                    log(f"   {key}: ray, {w} worker(s)")
                    r = timed_ingest(folders[key]["folder"], tmp / "bases" / f"{key}_ray{w}", language, "ray",
                                     folders[key]["per_document"])
                    loc = out["models"][key]["runs"]["local"]
                    st, lst = r["steady"] or {}, loc["steady"] or {}
                    r.update(workers=w, passages_per_s_per_worker=round(r["passages_per_s"] / w, 2),
                             steady_passages_per_s_per_worker=round(st["passages_per_s"] / w, 2) if st else None,
                             ratio_to_local=round(r["passages_per_s"] / loc["passages_per_s"], 3),
                             steady_ratio_to_local=round(st["passages_per_s"] / lst["passages_per_s"], 3) if st and lst else None,
                             cluster=cluster)
                    r["equality_with_local"] = equality(tmp / "bases" / f"{key}_local", tmp / "bases" / f"{key}_ray{w}", language)
                    out["models"][key]["runs"][f"ray_{w}"] = r
                    log(f"     {r}")
                    if key in eq_folders and w == max(a.workers):
                        f = eq_folders[key]
                        e = {k: v for k, v in f.items() if k not in ("folder", "per_document")}
                        e["local"] = timed_ingest(f["folder"], tmp / "bases" / f"{key}_eq_local", language, "local", f["per_document"])
                        e["ray"] = timed_ingest(f["folder"], tmp / "bases" / f"{key}_eq_ray{w}", language, "ray", f["per_document"])
                        e["equality"] = equality(tmp / "bases" / f"{key}_eq_local", tmp / "bases" / f"{key}_eq_ray{w}", language)
                        out["models"][key]["equal_check"] = e
            finally:
                ray.shutdown()
        out["summary"] = {key: {"equality": m["equal_check"]["equality"], "chunks": m["equal_check"]["chunks"],
                                "local_passages_per_s": m["equal_check"]["local"]["passages_per_s"],
                                "ray_passages_per_s": m["equal_check"]["ray"]["passages_per_s"]}
                          for key, m in out["models"].items()} if a.equal_only else {key: {"chunks": m["chunks"], "chunks_available": m["chunks_available"], "mean_chunk_chars": m["mean_chunk_chars"],
                                "local_passages_per_s": m["runs"]["local"]["passages_per_s"], "local_threads": m["local_threads"],
                                "local_steady_passages_per_s": (m["runs"]["local"]["steady"] or {}).get("passages_per_s"),
                                **{f"ray_{w}": {k: m["runs"][f"ray_{w}"][k] for k in (
                                    "wall_s", "first_document_s", "passages_per_s", "passages_per_s_per_worker",
                                    "steady_passages_per_s_per_worker", "ratio_to_local", "steady_ratio_to_local")}
                                   | {"steady_passages_per_s": (m["runs"][f"ray_{w}"]["steady"] or {}).get("passages_per_s"),
                                      "steady_reliable": (m["runs"][f"ray_{w}"]["steady"] or {}).get("reliable"),
                                      "ray_start_s": m["runs"][f"ray_{w}"]["cluster"]["ray_start_s"]}
                                   | {"chunk_ids_equal": m["runs"][f"ray_{w}"]["equality_with_local"]["chunk_ids_equal"],
                                      "max_abs_vector_diff": m["runs"][f"ray_{w}"]["equality_with_local"].get("max_abs_vector_diff")}
                                   for w in a.workers if f"ray_{w}" in m["runs"]}}
                          for key, m in out["models"].items()}
        out["machine"]["load_end"] = load()
        out["elapsed_s"] = round(time.perf_counter() - t_all, 1)
        text = json.dumps(out, indent=2)
        print(text)
        if a.out: Path(a.out).write_text(text + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_json(p: Path, obj):
    t = p.with_suffix(".tmp"); t.write_text(json.dumps(obj, indent=2) + "\n"); os.replace(t, p)


def _chunk_count(persist: Path, language: str) -> int:
    if not persist.exists(): return 0
    kt = trainer(persist, language)
    try: return len(kt.store.chunk_ids())
    finally: kt.close()


def piece_totals(pieces: list) -> dict:
    "Per configuration, the pieces summed: a killed piece counts its base's committed chunks over the time to its heartbeat."
    out = {}
    for i, p in enumerate(pieces):
        nxt = next((q for q in pieces[i + 1:] if q["config"] == p["config"]), None)
        if "wall_s" in p: chunks, wall, start = p["chunks"], p["wall_s"], p.get("first_new_document_s")
        else: chunks, wall, start = ((nxt["chunks_before"] - p["chunks_before"]) if nxt else p.get("committed_at_report")), p["heartbeat_s"], p.get("first_new_document_s")
        if chunks is None or p.get("lost"): continue   # killed, not yet resumed (counted when the next piece starts), or its base is gone
        t = out.setdefault(p["config"], {"pieces": 0, "killed_pieces": 0, "chunks": 0, "wall_s": 0.0, "startup_s": 0.0, "complete": False,
                                         "workers": p["workers"], "model": p["model"],
                                         "machine": "earlier (--earlier)" if p.get("earlier_machine") else "this report's"})
        t["pieces"] += 1; t["killed_pieces"] += "wall_s" not in p; t["chunks"] += chunks; t["wall_s"] += wall
        t["startup_s"] += start if start is not None else wall
        t["complete"] = t["complete"] or bool(p.get("complete"))
    for t in out.values():
        w, ok = t["workers"], t["wall_s"] and t["chunks"] >= STEADY_MIN   # no rate from a few blocks (Ray delivers in bursts)
        t.update(wall_s=round(t["wall_s"], 1), startup_s=round(t["startup_s"], 1),
                 passages_per_s=round(t["chunks"] / t["wall_s"], 2) if ok else None,
                 passages_per_s_per_worker=round(t["chunks"] / t["wall_s"] / w, 2) if ok else None,
                 startup_share=round(t["startup_s"] / t["wall_s"], 4) if t["wall_s"] else None)
    return out


def resumable(a):
    "Ray throughput at --chunks per configuration, resumable: go on with each configuration's ingest where the last run stopped."
    import ray
    from local_knowledge_trainer.cluster import _start_ray, default_actors, _object_store_bytes
    from local_knowledge_trainer.parser import DocumentParser
    d = Path(a.state); (d / "bases").mkdir(parents=True, exist_ok=True)
    log_p = d / "pieces.json"
    pieces = json.loads(log_p.read_text()) if log_p.exists() else []
    folders = {}
    for key in ([] if a.report else a.models):
        language, _ = MODELS[key]
        meta_p = d / f"folder_{key}_{a.chunks}.json"
        if not meta_p.exists():
            kt = trainer(d / "bases" / f"probe_{key}", language)
            parser = DocumentParser(chunk_size=kt.chunk_size, chunk_overlap=kt.chunk_overlap, **kt.embedder.window_args)
            f = make_folder(key, a.chunks, d, parser, a.text); kt.close()
            _write_json(meta_p, {k: (str(v) if k == "folder" else v) for k, v in f.items() if k != "per_document"})
        folders[key] = json.loads(meta_p.read_text())
        log(f"== {key}: {folders[key]['chunks']} chunks in {folders[key]['folder']}")
    for w in ([] if a.report else a.workers):
        todo = [k for k in a.models if not any(p["config"] == f"{k}_ray{w}" and p.get("complete") for p in pieces)]
        if not todo: continue
        la0 = load(); t = time.perf_counter()
        _start_ray(num_cpus=w + 1)
        cluster = {"ray_start_s": round(time.perf_counter() - t, 2), "num_cpus": w + 1, "actors": default_actors(ray.cluster_resources()),
                   "object_store_mib": round(_object_store_bytes() / 2**20), "load_before_start": la0}
        assert cluster["actors"] == w, cluster
        try:
            for key in todo:
                language, _ = MODELS[key]
                persist = d / "bases" / f"{key}_ray{w}"
                piece = {"config": f"{key}_ray{w}", "workers": w, "model": None, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                         "chunks_before": _chunk_count(persist, language), "heartbeat_s": 0.0, "load_before": load(), "cluster": cluster}
                pieces.append(piece); _write_json(log_p, pieces)
                log(f"   {piece['config']}: from {piece['chunks_before']} of {folders[key]['chunks']} chunks")
                kt = trainer(persist, language); piece["model"] = kt.embedder.name
                t0, lock, stop = time.perf_counter(), threading.Lock(), threading.Event()
                def beat():   # every 10 s, whatever the ingest reports: a kill loses at most 10 s of the piece's time
                    while not stop.wait(10):
                        with lock: piece["heartbeat_s"] = round(time.perf_counter() - t0, 2); piece["load_now"] = load(); _write_json(log_p, pieces)
                n0 = [None]
                def progress(stage, done, total):   # the first parse event reports the unchanged files: the count to pass
                    if stage != "parse": return
                    if n0[0] is None: n0[0] = done
                    if done > n0[0] and "first_new_document_s" not in piece:
                        with lock: piece["first_new_document_s"] = round(time.perf_counter() - t0, 2)
                threading.Thread(target=beat, daemon=True).start()
                try: r = kt.ingest(str(folders[key]["folder"]), engine="ray", progress=progress)
                finally: stop.set()
                with lock: piece.update(wall_s=round(time.perf_counter() - t0, 2), chunks=r.chunks, unchanged=len(r.unchanged),
                                        errors=len(r.errors), documents=len(r.approved_docs), load_after=load())
                kt.close()
                piece["complete"] = piece["chunks_before"] + r.chunks >= folders[key]["chunks"] and not r.errors
                _write_json(log_p, pieces); log(f"     {piece}")
        finally:
            ray.shutdown()
    if a.report:   # a configuration's last piece, running or killed: the chunks its base has committed so far, over its heartbeat
        for p in {q["config"]: q for q in pieces}.values():   # each configuration's last piece
            if "wall_s" not in p:
                language = MODELS[p["config"].rsplit("_ray", 1)[0]][0]
                p["committed_at_report"] = _chunk_count(d / "bases" / p["config"], language) - p["chunks_before"]
    stored = {p.stem: json.loads(p.read_text()) for p in sorted(d.glob("folder_*.json"))}   # every folder staged in DIR
    earlier = {}
    if a.report and a.earlier:   # an earlier machine's pieces: its complete configurations stand; an unfinished one lost its base
        e = json.loads(Path(a.earlier).read_text()); earlier = {"from": a.earlier, "machine": e["machine"], "folders": e["folders"]}
        done = {p["config"] for p in e["pieces"] if p.get("complete")}
        if done & {p["config"] for p in pieces}: raise SystemExit(f"{a.earlier}: {sorted(done & {p['config'] for p in pieces})} also run here: nothing to merge")
        old = [dict(p, earlier_machine=True, **({} if p["config"] in done else
                    {"lost": "the machine and this base were replaced before the configuration finished: not counted, run again here"}))
               for p in e["pieces"]]
        pieces = old + pieces
        earlier["same_folders"] = {k: stored[k] == f for k, f in e["folders"].items() if k in stored}   # content-seeded: the same?
    out = {"bench": "ray_scale", "mode": "resumable throughput (--state)", "command": " ".join(["bench/ray_scale.py", *sys.argv[1:]]),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__, "platform": platform.platform(), **cpu()},
           "note": a.note, "folders": {k: {n: v for n, v in f.items() if n != "per_document"} for k, f in
                                       (folders or stored).items()},
           **({"earlier": earlier} if earlier else {}), "pieces": pieces, "summary": piece_totals(pieces)}
    text = json.dumps(out, indent=2); print(text)
    if a.out: Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
