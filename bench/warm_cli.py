"""Warm CLI benchmark: `lkt search` with an `lkt serve` running on the base (found through the base's serve.json, no
--server) against the cold path (the model loaded in the `lkt search` process), in the same run.

Prints ONE JSON object on stdout (progress on stderr); no timing assertions. The target of issue 26: a warm search
under 1 s wall.
  .venv/bin/python bench/warm_cli.py [--runs 10] [--persist DIR] [--corpus evals/sample_corpus] [--question Q]

  base    a base of --corpus built once with `lkt ingest` (the default model), unless --persist names one
  cold    --runs fresh `lkt search QUESTION --persist DIR --json` with no server running: wall median / min / max
  warm    the same command while `lkt serve --persist DIR --port P` runs: it reads the record, asks the server over HTTP
  check   every warm search was answered by the server (its access log counts the POST /search requests), the warm
          and cold results are the same chunks, and the record is gone after the server stops
"""
import argparse, json, os, signal, shutil, socket, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = "local_knowledge_trainer"
QUESTION = "What is the payback period of the solar array?"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}


def log(*a): print(*a, file=sys.stderr, flush=True)


def lkt_cmd():
    "The installed console script when there is one (what a user runs), else the same entry point through python -m."
    script = Path(sys.executable).parent / "lkt"
    return [sys.executable, str(script)] if script.exists() else [sys.executable, "-m", f"{LIB}.cli"]


def run(argv):
    "One `lkt ARGV` process: (wall seconds, CompletedProcess)."
    t = time.perf_counter()
    r = subprocess.run(lkt_cmd() + argv, cwd=ROOT, env=ENV, capture_output=True, text=True)
    return time.perf_counter() - t, r


def timed(argv, runs):
    "Wall seconds of `runs` fresh processes and the JSON each printed."
    times, outs = [], []
    for i in range(runs):
        s, r = run(argv)
        if r.returncode != 0: raise RuntimeError(f"lkt {' '.join(argv)} exited {r.returncode}: {r.stderr[-1500:]}")
        times.append(s); outs.append(json.loads(r.stdout))
        log(f"   {i + 1}/{runs}: {s:.3f} s")
    return {"median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4), "max_s": round(max(times), 4),
            "runs": runs, "times_s": [round(t, 4) for t in times]}, outs


def free_port():
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="searches per path (default 10)")
    ap.add_argument("--persist", help="an existing base (default: one built from --corpus in a temporary folder)")
    ap.add_argument("--corpus", default="evals/sample_corpus", help="corpus of the base built when --persist is not given")
    ap.add_argument("--question", default=QUESTION, help="the question searched")
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="lkt-warm-"))   # the server's log (and the base, without --persist)
    if a.persist: kb = Path(a.persist).absolute()
    else:
        kb = tmp / "kb"
        log(f"== base: lkt ingest {a.corpus} --persist {kb}")
        s, r = run(["ingest", a.corpus, "--persist", str(kb), "--json"])
        if r.returncode != 0: raise RuntimeError(f"ingest exited {r.returncode}: {r.stderr[-1500:]}")
        log(f"   {s:.1f} s")
    search = ["search", a.question, "--persist", str(kb), "--json"]
    out = {"question": a.question, "base": str(kb), "cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    try:
        if (kb / "serve.json").exists(): raise RuntimeError(f"{kb / 'serve.json'}: a server already runs on this base; stop it first")
        log(f"== cold: {a.runs} × lkt {' '.join(search)}")
        out["cold"], cold = timed(search, a.runs)
        port, log_path = free_port(), tmp / "serve.log"
        log(f"== lkt serve --persist {kb} --port {port}")
        with open(log_path, "w") as lf:
            srv = subprocess.Popen(lkt_cmd() + ["serve", "--persist", str(kb), "--port", str(port)], cwd=ROOT, env=ENV,
                                   stdout=lf, stderr=subprocess.STDOUT)
        try:
            t0 = time.perf_counter()
            while not (kb / "serve.json").exists():
                if srv.poll() is not None: raise RuntimeError(f"lkt serve exited {srv.returncode}: {log_path.read_text()[-1500:]}")
                if time.perf_counter() - t0 > 300: raise RuntimeError("lkt serve did not record itself within 300 s")
                time.sleep(0.2)
            out["serve_start_s"] = round(time.perf_counter() - t0, 2)
            out["record"] = json.loads((kb / "serve.json").read_text())
            n0 = log_path.read_text().count('"POST /search')
            log(f"== warm: {a.runs} × lkt {' '.join(search)} (server up after {out['serve_start_s']} s)")
            out["warm"], warm = timed(search, a.runs)
            out["served_by_server"] = log_path.read_text().count('"POST /search') - n0
        finally:
            srv.send_signal(signal.SIGINT)
            try: srv.wait(60)
            except subprocess.TimeoutExpired: srv.kill(); srv.wait()
        out["record_removed_at_stop"] = not (kb / "serve.json").exists()
        ids = lambda js: [r["id"] for r in js["results"]]
        out["same_results"] = all(ids(x) == ids(cold[0]) for x in cold + warm)
        out["speedup"] = round(out["cold"]["median_s"] / out["warm"]["median_s"], 1)
        out["target_warm_s"] = 1.0
        out["warm_below_target"] = out["warm"]["median_s"] < 1.0
        out["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__": main()
