"""Run every benchmark script in bench/ and collect their results into bench/RESULTS.json and bench/RESULTS.md.

Each script (parse, ingest, query, stats, quality, hnsw_recall, startup, …, e5_engine, pt_base, static_tier — missing ones are skipped) prints ONE JSON object on
stdout; its stderr (progress bars) passes through. The markdown table is what the README shows.

  .venv/bin/python bench/run_all.py [--only quality parse] [--skip query] [--timeout 3600] [--quick]

quality runs with --sweep by default; --quick passes light options instead (quality: --max-queries 200; query: --sizes 10000;
startup: --runs 3; ingest: --docs 100; static_tier: --speed-passages 200). quality, ingest and query measure every embedding
backend (all-MiniLM-L6-v2, multilingual-e5-small, use-multilingual-v3); --measured copies each script's JSON to bench/measured/<script>.json.
A copy is also written to bench/results/latest.{json,md} (git-ignored) for local history.
"""
import argparse, datetime, json, os, platform, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPTS = ("parse", "ingest", "query", "stats", "quality", "hnsw_recall", "startup", "serve", "reliability", "snapshot", "scale", "bm25_scale",
           "e5_engine", "pt_base", "static_tier", "warm_cli", "claims")
DEFAULT_ARGS = {"quality": ["--sweep"], "bm25_scale": ["--sizes", "10000", "100000"]}   # 1M: run bench/scale.py and bench/bm25_scale.py by hand
QUICK = {"quality": ["--max-queries", "200"], "query": ["--sizes", "10000"], "startup": ["--runs", "3"], "ingest": ["--docs", "100"],
         "serve": ["--requests", "1000"], "reliability": ["--kills", "20", "--skip-large"], "scale": ["--sizes", "10000", "--no-extras"], "bm25_scale": ["--sizes", "10000"],
         "pt_base": ["--chunks", "2000"], "static_tier": ["--speed-passages", "200"], "claims": ["--n", "100", "--docs", "200"]}


def log(*a): print(*a, file=sys.stderr, flush=True)


def parse_json(stdout: str):
    "The JSON object a script printed (the whole stdout, else its last line that parses)."
    s = stdout.strip()
    try: return json.loads(s)
    except json.JSONDecodeError: pass
    for line in reversed(s.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try: return json.loads(line)
            except json.JSONDecodeError: continue
    raise ValueError("no JSON object on stdout")


def run_one(name: str, extra: list, timeout: float) -> dict:
    path = HERE / f"{name}.py"
    t = time.perf_counter()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "MPLBACKEND": "Agg"}
    try:
        p = subprocess.run([sys.executable, str(path), *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=None,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "elapsed_s": round(time.perf_counter() - t, 1), "timeout_s": timeout}
    out = {"status": "ok" if p.returncode == 0 else "failed", "returncode": p.returncode, "elapsed_s": round(time.perf_counter() - t, 1),
           "args": extra}
    try: out["result"] = parse_json(p.stdout)
    except ValueError as e:
        out["status"] = "failed"; out["error"] = f"{e}; stdout tail: {p.stdout[-500:]!r}"
    return out


def _fmt(v):
    if isinstance(v, bool): return "yes" if v else "no"
    if isinstance(v, float): return f"{v:.4g}"
    return str(v)


def flatten(d, prefix="", out=None, depth=0, max_depth=4):
    "Numeric and short scalar leaves of a nested dict as (dotted key, value)."
    out = [] if out is None else out
    if isinstance(d, dict):
        for k, v in d.items():
            if depth < max_depth: flatten(v, f"{prefix}.{k}" if prefix else str(k), out, depth + 1, max_depth)
    elif isinstance(d, (int, float, bool)) or (isinstance(d, str) and len(d) < 60):
        out.append((prefix, d))
    return out


def _d(v):
    "A paired difference as '+0.0123 [−0.0100, +0.0300], p_holm' (with * when significant)."
    if not v: return "—"
    p = "<1e-4" if v["p_holm"] == 0 else f"={v['p_holm']:.3g}"  # a resampling p of 0: below 1 / 10,000 resamples
    return f"{v['diff']:+.4f} [{v['ci'][0]:+.4f}, {v['ci'][1]:+.4f}] p{p}" + (" *" if v["significant"] else "")


def quality_md(res: dict) -> list:
    "bench/quality.py: one row per collection, backend and system; the tuned-vs-best-single test; the multilingual default."
    k = res.get("k", 10)
    lines = [f"| collection | backend | docs | queries | system | nDCG@{k} | Recall@{k} | MRR@{k} | vs best single channel (Holm) |",
             "|---|---|---:|---:|---|---:|---:|---:|---|"]
    for name, d in res.get("datasets", {}).items():
        for model, r in d.get("models", {}).items():
            key = r.get("key", {})
            for m, v in r["modes"].items():
                cmp = "best single" if m == r.get("best_single") else \
                      _d(key.get("tuned_minus_best_single", {}).get(f"ndcg@{k}")) if m == "hybrid_tuned" else \
                      _d(key.get("equal_minus_best_single", {}).get(f"ndcg@{k}")) if m == "hybrid" else ""
                lines.append(f"| {name} | {model} | {r['n_docs']} | {r['n_queries']} | {m} | {v[f'ndcg@{k}']['mean']:.3f} | "
                             f"{v[f'recall@{k}']['mean']:.3f} | {v[f'mrr@{k}']['mean']:.3f} | {cmp} |")
            f = r.get("fusion") or {}
            if f.get("weights"): lines.append(f"| {name} | {model} | | | tuned fusion | weights {f['weights']}, candidates {f.get('candidates')} | | | "
                                              f"dense used in hybrid for {r.get('dense_in_hybrid_share', 0):.0%} of queries |")
        ref = next((r.get("reference_bm25_ndcg@10") for r in d.get("models", {}).values() if "reference_bm25_ndcg@10" in r), None)
        if ref: lines.append(f"| {name} | | | | reference word-level BM25 | {ref:.3f} | | | |")
    for name, why in res.get("skipped", {}).items(): lines.append(f"| {name} | skipped: {why} | | | | | | | |")
    lines.append("")
    lines.append("Differences are nDCG@10 of the system minus the better single channel of that run, paired over the queries, "
                 "95% CI; `*` significant at α = 0.05 after Holm over the six pairs of the four systems (paired bootstrap for "
                 "n ≥ 100, paired t below).")
    md = res.get("multilingual_default") or {}
    if md.get("pick"):
        t = md["table"]
        lines += ["", f"Multilingual default: **{md['pick']}** — {md['by']}: " +
                  ", ".join(f"{m} {v['mean_ndcg']:.3f} (dense {v['mean_dense_ndcg']:.3f})" for m, v in t.items()) + "."]
    sw = {(n, m): r["sweep"] for n, d in res.get("datasets", {}).items() for m, r in d.get("models", {}).items() if "sweep" in r}
    if sw:
        lines += ["", f"Hybrid nDCG@{k} under other settings (defaults: weights 1/1, candidates 20, default tokenizer):", "",
                  "| collection | backend | setting | hybrid nDCG@10 |", "|---|---|---|---:|"]
        for (n, m), s in sw.items():
            for group in ("weights", "candidates"):
                for key, v in s.get(group, {}).items(): lines.append(f"| {n} | {m} | {group} {key} | {v:.3f} |")
            for key, v in s.get("tokenizer", {}).items():
                lines.append(f"| {n} | {m} | tokenizer {key} | {v['hybrid']:.3f} (sparse {v['sparse']:.3f}) |")
    return lines


def ingest_md(res: dict) -> list:
    "bench/ingest.py: overhead ratios and passages/s per backend and thread count."
    lines = [f"{res.get('chunks')} chunks of {res.get('corpus')} ({res.get('docs')} documents), target overhead ≤ {res.get('target_ratio')}.", "",
             "| backend | threads | raw passages/s | ingest passages/s | ingest / raw | embed / raw | + graph | + graph + tuning |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m, b in res.get("backends", {}).items():
        if "error" in b: lines.append(f"| {m} | error: {b['error'][:80]} | | | | | | |"); continue
        for n, v in b["by_threads"].items():
            best = " (best)" if int(n) == b["best_threads"] else ""
            lines.append(f"| {m} | {n}{best} | {v['raw_passages_per_s']} | {v['ingest_passages_per_s']} | {v['overhead_ratio']} | "
                         f"{v['embed_ratio']} | {v.get('overhead_ratio_with_graph', '')} | {v.get('overhead_ratio_with_tuning', '')} |")
    return lines


def query_md(res: dict) -> list:
    "bench/query.py: the engine comparison and scale as flat leaves; per-backend latency at real chunks as a table."
    lines = ["| measure | value |", "|---|---|"]
    leaves = flatten({k: v for k, v in res.items() if k != "backends"})
    for k, v in leaves[:40]: lines.append(f"| {k} | {_fmt(v)} |")
    b = res.get("backends")
    if b:
        lines += ["", f"Per backend at {b['n_chunks']} real chunks, {b['n_queries']} real queries (ms; search alone, query encode apart):", "",
                  "| backend | threads | encode p50 / p95 | " + " | ".join(f"{m} p50 / p95" for m in ("sparse", "dense", "hybrid", "text")) + " |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for m, r in b.get("models", {}).items():
            if "error" in r: lines.append(f"| {m} | error: {r['error'][:80]} | | | | | |"); continue
            cell = lambda x: f"{x['p50']} / {x['p95']}" if x else "—"
            lines.append(f"| {m} | {r['threads']} | {cell(r['encode_ms'])} | " +
                         " | ".join(cell(r["latency_ms"].get(x)) for x in ("sparse", "dense", "hybrid", "text")) + " |")
    return lines


def startup_md(res: dict) -> list:
    "bench/startup.py: wall times as multiples of `python -c pass`, the cold search split, the slowest imports."
    ref = res.get("reference", {}).get("median_s")
    def row(label, d):
        if not isinstance(d, dict): return f"| {label} | — | | |"
        if "error" in d: return f"| {label} | error: {d['error'][:80]} | | |"
        heavy = (", ".join(d["heavy_imports"]) or "none") if "heavy_imports" in d else ""
        return f"| {label} | {d['median_s']:.3f} | {d.get('ratio_to_reference', '')} | {heavy} |"
    lines = ["| command | median wall (s) | × `python -c pass` | heavy modules imported |", "|---|---:|---:|---|",
             row("`python -c pass` (reference)", res.get("reference")), row("`lkt --help`", res.get("help")),
             row("`lkt stats --json`", res.get("stats")),
             row("`lkt search` (cold)", (res.get("search") or {}).get("cold_cli"))]
    st = (res.get("search") or {}).get("stages")
    if isinstance(st, dict) and "error" not in st:
        keys = ("process_start_s", "import_s", "construct_s", "model_load_s", "encode_s", "search_s", "other_s")
        lines += ["", "Cold `lkt search`, split inside one fresh process (seconds); warm = a second search there:", "",
                  "| " + " | ".join(k[:-2] for k in keys) + " | warm |", "|" + "---:|" * (len(keys) + 1),
                  "| " + " | ".join(f"{st.get(k, 0):.3f}" for k in keys) + f" | {st.get('warm_total_s', 0):.4f} |"]
    elif isinstance(st, dict): lines += ["", f"search stages: error: {st['error']}"]
    for target, d in (res.get("importtime") or {}).items():
        if not isinstance(d, dict) or "error" in d: continue
        lines += ["", f"`import {target}`: {d['total_ms']} ms, {d['modules_imported']} modules; slowest (cumulative ms): " +
                  ", ".join(f"{x['module']} {x['cumulative_ms']}" for x in d["top5"])]
    return lines


def to_markdown(all_res: dict) -> str:
    lines = ["# Benchmarks", "", f"Generated by `bench/run_all.py` on {all_res['created']} "
             f"({all_res['platform']}, Python {all_res['python']}, {all_res.get('git', '')}).", "",
             "| script | status | time (s) |", "|---|---|---:|"]
    for name, r in all_res["scripts"].items():
        lines.append(f"| {name} | {r['status']} | {r.get('elapsed_s', '')} |")
    for name, r in all_res["scripts"].items():
        lines += ["", f"## {name}", ""]
        if r["status"] == "missing": lines.append("not present in bench/"); continue
        if "result" not in r: lines.append(f"no result: {r.get('error', r['status'])}"); continue
        if name == "quality": lines += quality_md(r["result"]); continue
        if name == "startup": lines += startup_md(r["result"]); continue
        if name == "ingest": lines += ingest_md(r["result"]); continue
        if name == "query": lines += query_md(r["result"]); continue
        lines += ["| measure | value |", "|---|---|"]
        leaves = flatten(r["result"])
        for k, v in leaves[:60]: lines.append(f"| {k} | {_fmt(v)} |")
        if len(leaves) > 60: lines.append(f"| … | {len(leaves) - 60} more in RESULTS.json |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="run only these scripts")
    ap.add_argument("--skip", nargs="*", default=[], help="skip these scripts")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per script")
    ap.add_argument("--quick", action="store_true", help="lighter options for the slow scripts")
    ap.add_argument("--out", default=str(HERE), help="folder for RESULTS.json / RESULTS.md")
    ap.add_argument("--measured", action="store_true", help="also write each successful script's JSON to bench/measured/<script>.json")
    a = ap.parse_args(argv)
    names = [n for n in (a.only or SCRIPTS) if n not in a.skip]
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    res = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "platform": platform.platform(terse=True),
           "python": platform.python_version(), "git": git.stdout.strip() if git.returncode == 0 else None, "scripts": {}}
    for n in names:
        if not (HERE / f"{n}.py").exists(): res["scripts"][n] = {"status": "missing"}; log(f"== {n}: missing, skipped"); continue
        log(f"== {n}")
        res["scripts"][n] = run_one(n, QUICK.get(n, []) if a.quick else DEFAULT_ARGS.get(n, []), a.timeout)
        log(f"   {n}: {res['scripts'][n]['status']} in {res['scripts'][n].get('elapsed_s')} s")
        if a.measured and res["scripts"][n]["status"] == "ok":
            (HERE / "measured").mkdir(exist_ok=True)
            (HERE / "measured" / f"{n}.json").write_text(json.dumps(res["scripts"][n]["result"], indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    md = to_markdown(res)
    (out / "RESULTS.json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "RESULTS.md").write_text(md, encoding="utf-8")
    latest = HERE / "results"; latest.mkdir(exist_ok=True)
    (latest / "latest.json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (latest / "latest.md").write_text(md, encoding="utf-8")
    print(json.dumps({"bench": "run_all", "written": [str(out / "RESULTS.json"), str(out / "RESULTS.md")],
                      "status": {n: r["status"] for n, r in res["scripts"].items()}}))
    return 0 if all(r["status"] in ("ok", "missing") for r in res["scripts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
