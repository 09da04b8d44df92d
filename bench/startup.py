"""Startup benchmark: how long `lkt` takes before it does any work, and where a cold `lkt search` spends its time.

Prints ONE JSON object on stdout (progress on stderr); no timing assertions. Every part catches its own errors and
reports them in the JSON, so the script keeps working while modules are being rewritten.
  .venv/bin/python bench/startup.py [--runs 5] [--corpus evals/sample_corpus] [--persist DIR]

  reference   `python -c pass`: the interpreter's own start, the unit of every `ratio` below
  help        `lkt --help`: wall time (median of --runs fresh processes) and which heavy modules it imported
  version     `lkt --version`: the same
  where       `lkt where --persist DIR --json` on the base below (the base location and the rule that chose it)
  stats       `lkt stats --persist DIR --json` on a base built once from the sample corpus with `lkt ingest`
  search      `lkt search QUESTION --persist DIR --json`, cold: total wall, and a split measured inside one fresh
              process — import of local_knowledge_trainer.trainer, KnowledgeTrainer(persist_dir=DIR), model load,
              query encoding, search (`kt.query`, what `lkt search` runs) — plus a warm second search in that process
  importtime  `python -X importtime -c "import local_knowledge_trainer"` and `… .trainer`: total and top five imports
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = "local_knowledge_trainer"
HEAVY = ["torch", "sentence_transformers", "spacy", "scipy", "sklearn", "pandas", "faiss", "transformers"]
QUESTION = "What is the payback period of the solar array?"
WARM_QUESTION = "How many photovoltaic panels were installed on the warehouse roof?"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}


def log(*a): print(*a, file=sys.stderr, flush=True)


def lkt_cmd():
    "The installed console script when there is one (what a user runs), else the same entry point through python -c."
    script = Path(sys.executable).parent / "lkt"
    if script.exists(): return [sys.executable, str(script)]
    return [sys.executable, "-c", f"import sys; from {LIB}.cli import main; sys.exit(main())"]


def run(cmd, **kw):
    "One subprocess: (seconds, CompletedProcess)."
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, **kw)
    return time.perf_counter() - t, r


def failure(r, what):
    return {"error": f"{what} exited {r.returncode}", "stderr_tail": r.stderr[-1500:]}


def timed(cmd, runs, ok=(0,)):
    "Median / min / max wall seconds of `runs` fresh processes; an error dict if one fails."
    times = []
    for _ in range(runs):
        s, r = run(cmd)
        if r.returncode not in ok: return failure(r, " ".join(cmd[1:]))
        times.append(s)
    return {"median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4), "max_s": round(max(times), 4),
            "runs": runs}


def importtime(cmd):
    "`-X importtime` of a python command: [(depth, module, self µs, cumulative µs)] in import order, and the result."
    s, r = run([sys.executable, "-X", "importtime", *cmd])
    rows = []
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line or "[us]" in line: continue
        self_us, cum_us, name = line[len("import time:"):].split("|")
        depth = (len(name) - len(name.lstrip(" "))) // 2
        rows.append((depth, name.strip(), int(self_us), int(cum_us)))
    return rows, r


def heavy_of(rows): return sorted({name.split(".")[0] for _, name, _, _ in rows} & set(HEAVY))


def with_ratio(d, ref):
    if ref and "median_s" in d: d["ratio_to_reference"] = round(d["median_s"] / ref, 2)
    return d


def measure_cmd(cmd, runs, ref, ok=(0,)):
    "Wall time of a command (median of `runs`) and the heavy modules it imports."
    out = with_ratio(timed(cmd, runs, ok), ref)
    rows, r = importtime(cmd[1:])
    if r.returncode in ok: out["heavy_imports"] = heavy_of(rows); out["modules_imported"] = len(rows)
    else: out.setdefault("importtime_error", failure(r, "importtime run"))
    return out


def top_imports(target):
    "Total and top five imports (by cumulative time) of `import target`, interpreter start-up imports left out."
    startup = {name for _, name, _, _ in importtime(["-c", "pass"])[0]}
    rows, r = importtime(["-c", f"import {target}"])
    if r.returncode: return failure(r, f"import {target}")
    rows = [x for x in rows if x[1] not in startup]
    own = {target} | {".".join(target.split(".")[:i]) for i in range(1, target.count(".") + 1)}
    top = sorted((x for x in rows if x[1] not in own), key=lambda x: -x[3])[:5]
    return {"total_ms": round(sum(c for d, _, _, c in rows if d == 0) / 1000, 1), "modules_imported": len(rows),
            "heavy_imports": heavy_of(rows),
            "top5": [{"module": n, "cumulative_ms": round(c / 1000, 1), "self_ms": round(s / 1000, 1), "depth": d}
                     for d, n, s, c in top]}


STAGES = r'''
import json, sys, time
persist, q, q2 = sys.argv[1:4]
out, T = {}, time.perf_counter
def stage(name, fn):
    t = T()
    try: v = fn()
    except BaseException as e:
        out[name + "_s"] = round(T() - t, 4); out["error"] = f"{name}: {type(e).__name__}: {e}"
        print("LKT-STAGES " + json.dumps(out)); sys.exit(0)
    out[name + "_s"] = round(T() - t, 4); return v
mod = stage("import", lambda: __import__("local_knowledge_trainer.trainer", fromlist=["KnowledgeTrainer"]))
kt = stage("construct", lambda: mod.KnowledgeTrainer(persist_dir=persist))
kb = getattr(kt, "kb", None)
emb = kb.embedder if kb is not None and hasattr(kb, "embedder") else kt.embedder
out["embedder_from"] = "kt.kb.embedder" if kb is not None and hasattr(kb, "embedder") else "kt.embedder"
stage("model_load", lambda: emb.load() if hasattr(emb, "load") else emb.model)
enc = getattr(emb, "encode_query", None) or (lambda s: emb.encode([s])[0])
stage("encode", lambda: enc(q))
r = stage("search", lambda: kt.query(q, k=5))
out["hits"] = len(getattr(r, "source_chunks", []) or [])
stage("warm_encode", lambda: enc(q2))
stage("warm_search", lambda: kt.query(q2, k=5))
out["heavy_imports"] = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[4])))
try: kt.close()
except Exception: pass
print("LKT-STAGES " + json.dumps(out))
'''


def stages(persist, ref):
    "The cold search split into stages, timed with perf_counter inside one fresh process."
    s, r = run([sys.executable, "-c", STAGES, str(persist), QUESTION, WARM_QUESTION, json.dumps(HEAVY)])
    line = next((l for l in r.stdout.splitlines() if l.startswith("LKT-STAGES ")), None)
    if not line: return failure(r, "stage script")
    d = json.loads(line[len("LKT-STAGES "):])
    d["process_wall_s"] = round(s, 4)
    d["process_start_s"] = ref                       # the interpreter start, from the reference
    inside = sum(v for k, v in d.items() if k in ("import_s", "construct_s", "model_load_s", "encode_s", "search_s"))
    d["cold_total_in_process_s"] = round(inside, 4)
    d["other_s"] = round(s - inside - (d.get("warm_encode_s", 0) + d.get("warm_search_s", 0)) - (ref or 0), 4)
    if "warm_search_s" in d: d["warm_total_s"] = round(d["warm_encode_s"] + d["warm_search_s"], 4)
    return d


def build_base(corpus, persist):
    "A persisted base from the corpus with `lkt ingest` (once)."
    s, r = run(lkt_cmd() + ["ingest", str(corpus), "--persist", str(persist), "--json"])
    out = {"corpus": str(Path(corpus).resolve().relative_to(ROOT)) if Path(corpus).resolve().is_relative_to(ROOT)
           else str(corpus), "ingest_s": round(s, 2), "returncode": r.returncode}
    if r.returncode not in (0, 4): out.update(failure(r, "lkt ingest")); return out
    try:
        j = json.loads(r.stdout)
        out.update(files=j.get("total_docs"), chunks=(j.get("stats") or {}).get("chunks", j.get("chunks")))
    except ValueError: out["note"] = "ingest printed no JSON"
    return out


def part(name, fn, *a):
    log(f"== {name}")
    try: return fn(*a)
    except Exception as e: return {"error": f"{type(e).__name__}: {e}"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per wall-time figure (median)")
    ap.add_argument("--search-runs", type=int, default=3, help="fresh processes for the cold `lkt search` wall time")
    ap.add_argument("--corpus", default=str(ROOT / "evals" / "sample_corpus"))
    ap.add_argument("--persist", help="use (or build) the base here instead of a temporary folder, and keep it")
    a = ap.parse_args(argv)
    res = {"bench": "startup", "python": sys.version.split()[0], "cpus": os.cpu_count(), "heavy_modules": HEAVY,
           "lkt": " ".join(Path(c).name for c in lkt_cmd()[:2])}
    ref = part("reference: python -c pass", timed, [sys.executable, "-c", "pass"], a.runs)
    res["reference"] = ref
    r0 = ref.get("median_s")
    res["help"] = part("lkt --help", measure_cmd, lkt_cmd() + ["--help"], a.runs, r0)
    res["version"] = part("lkt --version", measure_cmd, lkt_cmd() + ["--version"], a.runs, r0)
    tmp = None if a.persist else tempfile.mkdtemp(prefix="lkt-startup-")
    persist = Path(a.persist) if a.persist else Path(tmp) / "base"
    try:
        res["base"] = part("lkt ingest (once)", build_base, a.corpus, persist) if not (persist / "manifest.json").exists() \
            else {"reused": str(persist)}
        if "error" not in res["base"]:
            res["where"] = part("lkt where", measure_cmd, lkt_cmd() + ["where", "--persist", str(persist), "--json"], a.runs, r0)
            res["stats"] = part("lkt stats", measure_cmd, lkt_cmd() + ["stats", "--persist", str(persist), "--json"], a.runs, r0)
            search = lkt_cmd() + ["search", QUESTION, "--persist", str(persist), "--json"]
            res["search"] = {"question": QUESTION,
                             "cold_cli": part("lkt search (cold)", measure_cmd, search, a.search_runs, r0, (0, 5)),
                             "stages": part("search stages", stages, persist, r0)}
    finally:
        if tmp: shutil.rmtree(tmp, ignore_errors=True)
    res["importtime"] = {t: part(f"importtime {t}", top_imports, t) for t in (LIB, f"{LIB}.trainer")}
    print(json.dumps(res, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
