"""LLM helper overhead: what local_knowledge_trainer.llm costs on top of the model's own time.

Prints ONE JSON object on stdout; no timing assertions. The server is a local stand-in that answers at once (an
http.server on 127.0.0.1 speaking Ollama's /api/generate, HTTP/1.1 keep-alive), so every number is client overhead.
  .venv/bin/python bench/llm.py [--calls 200] [--runs 5]

  import_s        `import local_knowledge_trainer.llm` in a fresh process (median of --runs), and whether httpx got imported
  first_call_s    the first call of a new ollama_llm in a fresh process: httpx import + client + connection (median of --runs)
  per_call_ms     median over --calls calls of: the reused client (llm(prompt)), a new httpx.Client per call, and the
                  standard library's urllib (what the helpers used before)
  stream_ms       median of llm.stream(prompt) consumed whole (4 pieces)
"""
import argparse, http.server, json, os, statistics, subprocess, sys, threading, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
PIECES = ["Paris", " is", " the", " capital."]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True          # as Go servers (Ollama) and uvicorn do
    def log_message(self, *a): pass
    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if payload.get("stream"):
            body = b"".join(json.dumps({"response": p, "done": False}).encode() + b"\n" for p in PIECES) + b'{"response": "", "done": true}\n'
            ctype = "application/x-ndjson"
        else: body, ctype = json.dumps({"response": "".join(PIECES), "done": True}).encode(), "application/json"
        self.send_response(200); self.send_header("Content-Type", ctype); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)


def serve():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler); httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def median_s(fn, n):
    ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def fresh(code, runs):
    "Median seconds printed by `code` in fresh processes, and the last stdout."
    vals, out = [], ""
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True).stdout.strip()
        vals.append(float(out.split()[0]))
    return statistics.median(vals), out


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--calls", type=int, default=200); ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    httpd, url = serve()
    imp, out = fresh("import sys, time; t = time.perf_counter(); import local_knowledge_trainer.llm; "
                     "print(time.perf_counter() - t, 'httpx' in sys.modules)", a.runs)
    first, _ = fresh("import time; from local_knowledge_trainer.llm import ollama_llm; f = ollama_llm('m', host=%r); "
                     "t = time.perf_counter(); f('q'); print(time.perf_counter() - t)" % url, a.runs)

    import httpx, urllib.request
    from local_knowledge_trainer.llm import ollama_llm
    llm = ollama_llm("m", host=url); llm("q")
    payload = {"model": "m", "prompt": "q", "stream": False, "options": {"temperature": 0.0}}
    def new_client():
        with httpx.Client(trust_env=False, timeout=60) as c: c.post(url + "/api/generate", json=payload).json()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    def stdlib():
        req = urllib.request.Request(url + "/api/generate", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
        with opener.open(req, timeout=60) as r: json.loads(r.read())
    res = {"import_s": round(imp, 4), "import_pulls_httpx": out.split()[1] == "True", "first_call_s": round(first, 4),
           "per_call_ms": {"reused_client": round(1000 * median_s(lambda: llm("q"), a.calls), 3),
                           "new_httpx_client_per_call": round(1000 * median_s(new_client, max(a.calls // 10, 5)), 3),
                           "urllib": round(1000 * median_s(stdlib, a.calls), 3)},
           "stream_ms": round(1000 * median_s(lambda: list(llm.stream("q")), a.calls), 3),
           "calls": a.calls, "runs": a.runs, "python": sys.version.split()[0], "httpx": httpx.__version__}
    llm.close(); httpd.shutdown()
    print(json.dumps(res, indent=1))


if __name__ == "__main__": main()
