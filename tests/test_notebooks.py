"""Every notebook in nbs/ and evals/ is one pytest case, and `make test` executes each of them exactly once.

The case runs `nbs/_docs/build.py --execute NOTEBOOK` in a fresh process: the notebook is executed the way `nbdev_test`
executes it (`nbdev.test.test_nb`: execnb's CaptureShell in the notebook's folder, the cells flagged with settings.ini's
`tst_flags` — `#| slow` — skipped unless LKT_SLOW=1, `#| eval: false` skipped, the first failing cell fails the run) and
saved with its outputs to build/executed/<path>.ipynb. tests/test_docs.py then renders those copies without executing
anything again (tests/conftest.py runs this file first). A failing cell fails its case with the cell and its traceback.
No timeout: a slow machine makes the run slower, not red.

The selected notebooks start together when the first case runs, LKT_TEST_JOBS processes at a time (default: the CPU
count, at most 2; 1 runs them one by one); each case waits for its own notebook, so the report and the order stay those
of a serial run. Every notebook runs in its own process and folder, servers on port 0 and caches written atomically.
"""
import json, os, subprocess, sys, warnings
from concurrent.futures import ThreadPoolExecutor

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


@pytest.fixture(scope="module")
def notebook_pool(request, build):
    "{notebook: Future of its `build.py --execute` run} for the notebooks this session selected, started together."
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg",
           "TOKENIZERS_PARALLELISM": "false"}
    run = lambda nb: subprocess.run([sys.executable, str(build.DOCS / "build.py"), "--execute", str(nb)], cwd=build.ROOT,
                                    env=env, capture_output=True, text=True)
    nbs = [i.callspec.params["notebook"] for i in request.session.items
           if i.originalname == "test_notebook" and not (i.callspec.params["notebook"].parent / ".notest").exists()]
    ex = ThreadPoolExecutor(_jobs())
    yield {nb: ex.submit(run, nb) for nb in sorted(nbs, key=lambda nb: -_last_seconds(build, nb))}   # longest first
    ex.shutdown(cancel_futures=True)   # after -x or ^C: the queued notebooks do not run


def test_notebook(notebook, build, notebook_runs, notebook_pool):
    "Execute one notebook (as nbdev_test does) and keep the executed copy for the docs; its failing cell is shown."
    rel = notebook.relative_to(build.ROOT).as_posix()
    if (notebook.parent / ".notest").exists(): pytest.skip(".notest next to the notebook: nbdev_test skips it too")
    r = notebook_pool[notebook].result()
    notebook_runs[rel] = r.returncode == 0
    if r.returncode: pytest.fail(f"{rel} failed:\n{_clip(r.stderr)}\n{_clip(r.stdout, 3000)}", pytrace=False)
    copy = build.executed_path(notebook)
    meta = json.loads(copy.read_text(encoding="utf-8"))["metadata"]["lkt_exec"]
    assert meta["ok"] and meta["source"] == rel and meta["mode"] == "full", meta
    assert set(meta["flags"]) == set(build.forced_flags()), meta
    for e in meta["doc_errors"]: warnings.warn(f"{rel}: show_doc for the docs failed (the docs build will stop): {e}")
