"""Every notebook in nbs/ and evals/ is one pytest case, and `make test` executes each of them exactly once.

The case runs `nbs/_docs/build.py --execute NOTEBOOK` in a fresh process: the notebook is executed the way `nbdev_test`
executes it (`nbdev.test.test_nb`: execnb's CaptureShell in the notebook's folder, the cells flagged with settings.ini's
`tst_flags` — `#| slow` — skipped unless LKT_SLOW=1, `#| eval: false` skipped, the first failing cell fails the run) and
saved with its outputs to build/executed/<path>.ipynb. tests/test_docs.py then renders those copies without executing
anything again (tests/conftest.py runs this file first). A failing cell fails its case with the cell and its traceback.
No timeout: a slow machine makes the run slower, not red.

The selected notebooks start together when the first case runs: one `build.py --execute NB… --jsonl` process runs
them longest first, LKT_TEST_JOBS at a time (default: the CPU count, at most 2; 1 runs them one by one), and prints
each result as it ends; each case waits for its own notebook, so the report and the order stay those of a serial run.
Every notebook still runs in its own fresh process and folder (forked from a server that imported the common
libraries once: build.py's PRELOAD), servers on port 0 and caches written atomically.
"""
import collections, json, os, signal, subprocess, sys, threading, warnings
from concurrent.futures import Future

import pytest


def _clip(text, n=12000):
    "Head and tail of a long output (the failing cell is at the head, the exception at the tail)."
    return text if len(text) <= n else text[: n // 3] + "\n[… output clipped …]\n" + text[-2 * n // 3:]


def test_notebooks_found(build):
    "The suite must never pass vacuously: nbs/ holds the numbered notebooks, and evals/ notebooks are included."
    nbs = build.notebooks()
    numbered = [p for p in nbs if p.parent.name == "nbs" and p.name[:2].isdigit()]
    assert len(numbered) >= 2, f"expected numbered notebooks in nbs/, found {[p.name for p in nbs]}"
    assert any(p.parent.name == "evals" for p in nbs), "the evals/ notebooks are missing from the run"


def _last_seconds(build, nb)->float:
    "Seconds the notebook's last executed copy took (a fresh clone has none: 0, run in the listed order)."
    try: return float(json.loads(build.executed_path(nb).read_text(encoding="utf-8"))["metadata"]["lkt_exec"]["seconds"])
    except (OSError, ValueError, KeyError, TypeError): return 0.0


def _jobs()->int:
    "LKT_TEST_JOBS, else the CPU count, at most 2."
    return max(1, int(os.environ.get("LKT_TEST_JOBS") or min(2, os.cpu_count() or 1)))


def _read_results(proc, futures, prefix):
    "Resolve each notebook's future from the runner's result lines; when it exits, fail the ones it never reported."
    tail = collections.deque(maxlen=200)
    for line in proc.stdout:
        if not line.startswith(prefix): tail.append(line); continue
        r = json.loads(line[len(prefix):])
        f = futures.get(r["notebook"])
        if f is not None and not f.done(): f.set_result(r)
    rc = proc.wait()
    for nb, f in futures.items():
        if not f.done(): f.set_result({"notebook": nb, "ok": False, "doc_errors": [], "error":
                                       f"the notebook runner exited ({rc}) before reporting it:\n{''.join(tail)}"})


@pytest.fixture(scope="module")
def notebook_pool(request, build):
    "{notebook: Future of its result} for the notebooks this session selected, run by one `build.py --execute --jsonl`."
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg",
           "TOKENIZERS_PARALLELISM": "false"}
    nbs = [i.callspec.params["notebook"] for i in request.session.items
           if i.originalname == "test_notebook" and not (i.callspec.params["notebook"].parent / ".notest").exists()]
    nbs = sorted(set(nbs), key=lambda nb: -_last_seconds(build, nb))          # longest first
    futures = {str(nb.resolve()): Future() for nb in nbs}
    if not nbs: yield {}; return
    proc = subprocess.Popen([sys.executable, str(build.DOCS / "build.py"), "--execute", *futures, "--jsonl",
                             "--jobs", str(_jobs())], cwd=build.ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    reader = threading.Thread(target=_read_results, args=(proc, futures, build.RESULT), daemon=True)
    reader.start()
    yield {nb: futures[str(nb.resolve())] for nb in nbs}
    if proc.poll() is None:                            # after -x or ^C: the runner and its notebooks stop
        try: os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError: pass
    reader.join(timeout=30)


def test_notebook(notebook, build, notebook_runs, notebook_pool):
    "Execute one notebook (as nbdev_test does) and keep the executed copy for the docs; its failing cell is shown."
    rel = notebook.relative_to(build.ROOT).as_posix()
    if (notebook.parent / ".notest").exists(): pytest.skip(".notest next to the notebook: nbdev_test skips it too")
    r = notebook_pool[notebook].result()
    notebook_runs[rel] = r["ok"]
    if not r["ok"]: pytest.fail(f"{rel} failed:\n{_clip(r['error'] or '')}", pytrace=False)
    copy = build.executed_path(notebook)
    meta = json.loads(copy.read_text(encoding="utf-8"))["metadata"]["lkt_exec"]
    assert meta["ok"] and meta["source"] == rel and meta["mode"] == "full", meta
    assert set(meta["flags"]) == set(build.forced_flags()), meta
    for e in meta["doc_errors"]: warnings.warn(f"{rel}: show_doc for the docs failed (the docs build will stop): {e}")
