#!/usr/bin/env python
"""Build the LKT documentation site offline: executed notebooks → nbdev processing → Sphinx + myst-nb → `_site/`.

    .venv/bin/python nbs/_docs/build.py            # full build: renders build/executed/ (executing what is missing), Sphinx -W
    .venv/bin/python nbs/_docs/build.py --fast     # for notebooks without an executed copy, run only what show_doc needs
    .venv/bin/python nbs/_docs/build.py --fresh    # ignore every cache: execute every notebook again, rebuild every page
    .venv/bin/python nbs/_docs/build.py --execute nbs/00_core.ipynb   # only execute (what tests/test_notebooks.py runs)

One execution per notebook. `make test` executes each notebook exactly once, in tests/test_notebooks.py, through
`--execute`: the notebook runs as `nbdev_test` runs it (`nbdev.test.test_nb`: execnb's CaptureShell, cwd = the notebook's
folder, cells flagged with settings.ini's `tst_flags` (`#| slow`) skipped unless forced (LKT_SLOW=1), `#| eval: false`
skipped, first failing cell fails the run) and is saved with its outputs to build/executed/<path>.ipynb. The docs build
then only *renders* those copies; a copy is reused while its key — this notebook, the library modules it imports
(followed transitively) and settings.ini — is unchanged and its run succeeded. Run alone (`make docs`), the build
executes the notebooks whose copy is missing or stale, the same way, 2 at a time.

Pipeline (Quarto is not needed; `nbdev_docs` keeps working for those who have it):
1. Execution (above). The executor also fills the `show_doc` cells nbdev's `add_show_docs` adds for exported names
   that have none, right after their export cell ran, without running a cell (so `_`, `Out` and the execution count
   stay as nbdev_test leaves them); a failing one is a docs error, not a test failure, as in nbdev.
2. nbdev processing of each executed copy with nbdev 2.4.14's own processors (`FrontmatterProc`, `add_show_docs`,
   `hide_line`, `rm_header_dash`, `add_links`, …). Where nbdev would *delete* a cell for Quarto (`#| hide`,
   `#| default_exp`, `#| exporti`, `show_doc` inputs) this build *tags* it instead (`remove-cell`, `remove-input`);
   `#| export` cells are shown as code; cells that were not run (`#| slow`, `#| eval: false`) are marked.
   myst-nb never executes anything (`nb_execution_mode = "off"` in conf.py). The committed notebooks stay
   output-free, so `nbdev_clean` leaves the tree unchanged.
3. Post-processing: show_doc outputs get stable anchors (`core.html#chunk`, as nbdev's `_modidx.py` links),
   nbdev doc links become relative, `NN_name.ipynb` links become `name.html`.
4. Generated pages: the API reference of every exported public name (from `local_knowledge_trainer/_modidx.py` and
   each module's `__all__`), and Results (bench/RESULTS.md, evals/baseline.json, or how to produce them).
5. Sphinx (furo theme, myst-nb, MathJax shipped locally) with warnings as errors into `_site/`.
"""
import argparse, ast, hashlib, html, importlib, inspect, json, os, re, shutil, subprocess, sys, time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

DOCS = Path(__file__).resolve().parent            # nbs/_docs: configuration, this script, static files
ROOT = DOCS.parents[1]                            # the repository
WORK = ROOT / "build" / "docs"                    # caches and generated sources (build/ is git-ignored)
EXECUTED = ROOT / "build" / "executed"            # executed copies of the notebooks, with outputs (see the docstring)
SRC, EXEC, DOCTREES = WORK / "src", WORK / "exec", WORK / "doctrees"   # EXEC: partial --fast executions
OUT = ROOT / "_site"
README_IMAGE = DOCS / "readme_plot.png"           # committed copy of one plot, shown by README.md
PLOT_PAGE = "distributions"                       # the page whose first plot becomes _static/lkt-plot.png
EXEC_VERSION = "2"                                # bump to invalidate every executed copy
LIB = "local_knowledge_trainer"
DOCS_ONLY = {"export", "exports", "exporti", "exec_doc"}   # cells nbdev itself runs for show_doc (`_do_eval`)

_dir_re = re.compile(r"^\s*#\s*\|\s*(.*?)\s*$")
_showdoc_re = re.compile(r"^show_doc\(", re.MULTILINE)
_ansi = re.compile(r"\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")


def log(*a): print("[docs]", *a, flush=True)


def _src(x): return "".join(x) if isinstance(x, list) else x


# ---------------------------------------------------------------------------------------------------------- inputs
def notebooks():
    "Notebooks in site order: index, numbered notebooks in nbs/, then evals/ notebooks (nbdev's `_`/`.` skip rules)."
    skip = lambda p, base: p.name.startswith(("_", ".")) or ".ipynb_checkpoints" in p.parts or any(
        q.startswith(("_", ".")) for q in p.relative_to(base).parts[:-1])
    nbs = [ROOT / "nbs" / "index.ipynb"] if (ROOT / "nbs" / "index.ipynb").exists() else []
    nbs += sorted(p for p in (ROOT / "nbs").rglob("*.ipynb") if p.name != "index.ipynb" and not skip(p, ROOT / "nbs"))
    nbs += sorted(p for p in (ROOT / "evals").rglob("*.ipynb") if not skip(p, ROOT / "evals"))
    return nbs


def page_name(nb: Path):
    """Page name as nbdev/Quarto names it (`00_core.ipynb` → `core`), so `_modidx.py` URLs resolve; evals get `evals-`.
    A numbered notebook that nbdev would call `index` (e.g. `08_index.ipynb`) keeps its stem: `index` is the home page."""
    from nbdev.doclinks import _nbpath2html
    nb = Path(nb).resolve()
    stem = _nbpath2html(Path(nb.name)).stem
    if nb.parent == ROOT / "nbs": return nb.stem if stem == "index" and nb.name != "index.ipynb" else stem
    if (ROOT / "nbs") in nb.parents: return "-".join(nb.parent.relative_to(ROOT / "nbs").parts + (stem,))
    return "evals-" + stem


ALIASES = {}   # nbdev's page name → this site's, where they differ (see page_name); filled by main()


def _lib_imports(src: str, pkg_mod: str = ""):
    "Modules of the library that `src` imports (absolute `local_knowledge_trainer.x` or relative `.x`)."
    try: tree = ast.parse(src)
    except SyntaxError: return set()
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names if a.name.split(".")[0] == LIB}
        elif isinstance(n, ast.ImportFrom):
            if n.level and pkg_mod: mod = LIB + ("." + n.module if n.module else "")
            elif n.module and n.module.split(".")[0] == LIB: mod = n.module
            else: continue
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in n.names}       # `from pkg import module`
    return out


def lib_hash(nb_dict):
    "Hash of the library modules this notebook uses, followed transitively, plus settings.ini."
    files = {p.relative_to(ROOT).with_suffix("").as_posix().replace("/", "."): p for p in (ROOT / LIB).rglob("*.py")}
    files[LIB] = ROOT / LIB / "__init__.py"
    src = "\n".join(_strip_directives(_src(c["source"])) for c in nb_dict["cells"] if c["cell_type"] == "code")
    todo = {m for m in _lib_imports(src) if m in files}
    seen = set()
    while todo:
        mod = todo.pop()
        if mod in seen: continue
        seen.add(mod)
        todo |= {x for x in _lib_imports(files[mod].read_text(encoding="utf-8"), mod) if x in files} - seen
    h = hashlib.sha256((ROOT / "settings.ini").read_bytes())
    for mod in sorted(seen): h.update(mod.encode()); h.update(files[mod].read_bytes())
    return h.hexdigest()


def _directives(src):
    "Leading `#|` directives of a code cell: `#| hide` → {'hide': ''}, `#| eval: false` → {'eval': 'false'}."
    d = {}
    for line in src.splitlines():
        m = _dir_re.match(line)
        if not m:
            if line.strip(): break
            continue
        body = m.group(1)
        if not body: continue
        first = body.split()[0]
        if ":" in first:
            k, _, v = body.partition(":")
        else:
            k, v = first, body[len(first):]
        d[k.strip()] = v.strip()
    return d


def _strip_directives(src):
    lines = src.splitlines()
    i = 0
    while i < len(lines) and (_dir_re.match(lines[i]) or not lines[i].strip()): i += 1
    return "\n".join(lines[i:])


# ---------------------------------------------------------------------------------------------------- 1. execution
def _rel(nb) -> Path:
    nb = Path(nb).resolve()
    try: return nb.relative_to(ROOT)
    except ValueError: return Path("_outside") / nb.name


def executed_path(nb, fast: bool = False) -> Path:
    "The executed copy of `nb`: build/executed/<its path in the repo> (a partial --fast run: build/docs/exec/…)."
    rel = _rel(nb)
    return EXEC / rel.with_suffix(".fast.ipynb") if fast else EXECUTED / rel


def exec_key(nb) -> str:
    "What an execution of `nb` depends on: the notebook itself, the library modules it imports, settings.ini."
    raw = Path(nb).read_bytes()
    return hashlib.sha256(EXEC_VERSION.encode() + hashlib.sha256(raw).digest() +
                          lib_hash(json.loads(raw)).encode()).hexdigest()


def forced_flags(extra: str = ""):
    "Test flags to run anyway (nbdev_test's `--flags`): those given, plus `slow` when LKT_SLOW is set (not 0)."
    flags = set(extra.split())
    if os.environ.get("LKT_SLOW", "") not in ("", "0"): flags.add("slow")
    return sorted(flags)


def copy_record(path, key, flags=()):
    "The `lkt_exec` record of an executed copy when it is usable: same key, the run succeeded, it ran `flags` too."
    try: meta = json.loads(Path(path).read_text(encoding="utf-8"))["metadata"]["lkt_exec"]
    except (OSError, ValueError, KeyError, TypeError): return None
    if meta.get("key") != key or not meta.get("ok") or not set(flags) <= set(meta.get("flags", [])): return None
    return meta


def _docs_only(cell):
    "For --fast: what nbdev's `exec_show_docs` runs — export cells, cells made only of imports, show_doc cells."
    if DOCS_ONLY & set(getattr(cell, "directives_", {}) or {}): return True
    if _showdoc_re.search(cell.source): return True
    try: tree = ast.parse(cell.source)
    except SyntaxError: return False
    return bool(tree.body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body)


def _show_doc_outputs(shell, src, errors):
    "Outputs of an inserted `show_doc(name)` cell, evaluated in the notebook's namespace without running a cell."
    m = re.fullmatch(r"show_doc\((.+)\)", src.strip(), re.S)
    try:
        from nbdev.showdoc import show_doc
        data, md = shell.display_formatter.format(show_doc(eval(m.group(1), shell.user_ns)))
    except Exception as e:
        errors.append(f"{src.strip()}: {type(e).__name__}: {e}")
        return None
    data = {k: v.splitlines(True) if k.startswith("text/") and isinstance(v, str) else v for k, v in data.items()}
    return [{"output_type": "execute_result", "data": data, "metadata": md, "execution_count": None}]


def execute_nb(nb_path, flags=(), fast: bool = False, timeout: int = None):
    """Execute one notebook as `nbdev_test` does (`nbdev.test.test_nb`) and save it with its outputs to
    `executed_path(nb_path, fast)`. Returns (ok, seconds, error: failing cell + traceback, or None, show_doc errors)."""
    from execnb.nbio import read_nb, nb2dict
    from execnb.shell import CaptureShell
    from fastcore.basics import str2bool
    from fastcore.xtras import working_directory
    from nbdev.config import get_config
    from nbdev.frontmatter import FrontmatterProc
    from nbdev.process import NBProcessor, nb_lang
    from nbdev.processors import add_show_docs
    for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                 "IN_TEST": "1"}.items(): os.environ[k] = v              # as nbdev_test runs notebooks
    if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))          # nbdev_test's `basepath`
    nb_path = Path(nb_path).resolve()
    key, raw = exec_key(nb_path), json.loads(nb_path.read_text(encoding="utf-8"))
    skip = set(get_config().tst_flags.split()) - set(flags)
    doc_errors = []

    class _add_show_docs(add_show_docs):                  # a show_doc nbdev cannot add is a docs error only
        def begin(self):
            try: super().begin()
            except Exception as e: doc_errors.append(f"add_show_docs: {type(e).__name__}: {e}")

    nb = read_nb(nb_path)
    orig = {id(c): i for i, c in enumerate(nb.cells)}    # the notebook's own cells (processors add and drop some)
    NBProcessor(nb=nb, procs=[FrontmatterProc, _add_show_docs], process=True)
    fm = getattr(nb, "frontmatter_", {}) or {}
    run = not str2bool(fm.get("skip_exec", False)) and nb_lang(nb) == "python"

    def no_eval(c):                                       # nbdev.test.test_nb's `_no_eval`, plus --fast
        if c.cell_type != "code": return True
        if "nbdev_export" + "(" in c.source: return True
        direc = getattr(c, "directives_", {}) or {}
        if direc.get("eval:", [""])[0].lower() == "false": return True
        if skip & direc.keys(): return True
        return fast and not _docs_only(c)

    ran, inserted, err, last, last_ran = {}, {}, None, None, False
    t = time.time()
    shell = CaptureShell(nb_path, timeout=timeout) if run else None   # inline PNG plots (mpl 'retina'), as nbdev_test
    with working_directory(nb_path.parent):
        for c in nb.cells:
            i = orig.get(id(c))
            if i is None:                                 # a show_doc cell add_show_docs put after export cell `last`
                if getattr(c, "has_sd", False) and last is not None:
                    outs = _show_doc_outputs(shell, c.source, doc_errors) if last_ran and err is None else None
                    inserted.setdefault(last, []).append((c.source, outs))
                continue
            last, last_ran = i, False
            if not run or err is not None or no_eval(c): continue
            c.idx_ = i                                    # tracebacks number cells as the notebook does
            shell.cell(c)
            ran[i], last_ran = nb2dict(list(c.get("outputs") or [])), True
            if shell.exc:
                tb = _ansi.sub("", shell.prettytb(fname=nb_path))
                err = f"failing cell #{i + 1} (id {raw['cells'][i].get('id')}) of {_rel(nb_path)}:\n" \
                      f"{_src(raw['cells'][i]['source'])}\n\n{tb}"
    secs = time.time() - t

    cells = []
    for i, rc in enumerate(raw["cells"]):
        rc = {**rc, "metadata": dict(rc.get("metadata", {}))}
        if rc["cell_type"] == "code":
            rc["outputs"], rc["execution_count"] = ran.get(i, []), None
            if i not in ran: rc["metadata"]["lkt_not_run"] = True
        cells.append(rc)
        for j, (src, outs) in enumerate(inserted.get(i, [])):
            cells.append({"cell_type": "code", "execution_count": None, "source": src, "outputs": outs or [],
                          "id": f"lkt-sd-{i}-{j}-" + hashlib.sha1(src.encode()).hexdigest()[:8],
                          "metadata": {"lkt_inserted": True, **({} if outs is not None else {"lkt_not_run": True})}})
    d = {**raw, "cells": cells}
    d["metadata"] = {**raw.get("metadata", {}), "lkt_exec": {
        "key": key, "source": _rel(nb_path).as_posix(), "mode": "fast" if fast else "full", "flags": sorted(flags),
        "executed": run, "ok": err is None, "error": err, "doc_errors": doc_errors, "seconds": round(secs, 1)}}
    dest = executed_path(nb_path, fast)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, dest)                                 # a reader never sees half a copy
    return err is None, secs, err, doc_errors


# Modules every notebook imports: the pool's fork server imports them once and each notebook's process is forked from
# it, still one fresh process per notebook (`max_tasks_per_child=1`). Not the package (a notebook imports it after
# its own edits) and not numba (10_golden checks it has not been imported). A module that fails to import is skipped.
PRELOAD = ["nbdev.test", "nbdev.processors", "nbdev.frontmatter", "nbdev.showdoc", "execnb.shell", "numpy", "pandas",
           "scipy.stats", "matplotlib.pyplot", "sklearn.neighbors", "statsmodels.api", "torch", "sentence_transformers",
           "spacy", "fastapi", "httpx"]


def _execute(args):
    "Pool worker: one notebook in a fresh process; its stray output (not the cells') is kept for a failure's report."
    nb_path, flags, fast, timeout = args
    import tempfile, traceback
    with tempfile.TemporaryFile() as f:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(f.fileno(), 1); os.dup2(f.fileno(), 2)     # the process ends with this notebook: no need to restore
        try: ok, secs, err, doc_errors = execute_nb(nb_path, flags, fast, timeout)
        except BaseException as e:                         # the executor itself failed (not a cell)
            err = f"{_rel(nb_path)}: {type(e).__name__}: {e}\n{traceback.format_exc()}"
            ok, secs, doc_errors = False, 0.0, []
        sys.stdout.flush(); sys.stderr.flush()
        f.seek(0); out = f.read().decode("utf-8", "replace").strip()
    if not ok and out: err += "\n\n--- the process's own output (last 4,000 characters) ---\n" + out[-4000:]
    return ok, secs, err, doc_errors


def run_pool(todo, jobs):
    "Execute `todo` = [(label, args for `_execute`)] in order, `jobs` at a time; yields (label, result) as each ends."
    ctx = get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=ctx, max_tasks_per_child=1) as ex:
        futs = {ex.submit(_execute, a): label for label, a in todo}
        for f in as_completed(futs): yield futs[f], f.result()


def ensure_executed(pages, fast, fresh, jobs, timeout, flags):
    "The executed copy of every page's notebook: reused when fresh, else executed now. Returns {page: copy path}."
    copies, todo = {}, []
    for page, nb in pages.items():
        key = exec_key(nb)
        if not fresh and copy_record(executed_path(nb), key, flags): copies[page] = executed_path(nb); continue
        if fast and not fresh and copy_record(executed_path(nb, True), key, flags):
            copies[page] = executed_path(nb, True); continue
        todo.append((page, (str(nb), flags, fast, timeout)))
    log(f"execution: {len(copies)} reused, {len(todo)} to run ({'fast' if fast else 'full'} mode, {jobs} at a time, "
        f"flags {' '.join(flags) or 'none'}; copies in {EXECUTED.relative_to(ROOT)}/)")
    errors = []
    for page, (ok, secs, err, _) in run_pool(todo, jobs) if todo else ():
        if not ok: errors.append(f"{page}: {err}"); log(f"FAILED {page}"); continue
        log(f"executed {page} in {secs:.1f} s")
        copies[page] = executed_path(pages[page], fast)
    if errors: raise SystemExit("docs build: notebook execution failed:\n" + "\n\n".join(errors))
    doc_errors = []
    for page, p in copies.items():
        doc_errors += [f"{page}: {e}" for e in json.loads(p.read_text(encoding="utf-8"))["metadata"]["lkt_exec"]["doc_errors"]]
    if doc_errors: raise SystemExit("docs build: show_doc failed for names nbdev documents automatically:\n" + "\n".join(doc_errors))
    return {page: copies[page] for page in pages}


RESULT = "LKT-NOTEBOOK-RESULT "                     # --jsonl: the prefix of each notebook's result line


def execute_main(paths, flags, jobs, timeout, jsonl=False):
    """`--execute`: run the notebooks (one in this process, several in a pool, in the order given), write their copies;
    1 when one fails. `jsonl`: also print each result as it ends, `RESULT` + JSON (what tests/test_notebooks.py reads)."""
    t, failed = time.time(), 0
    def report(label, res):
        nonlocal failed
        ok, secs, err, doc_errors = res
        if jsonl: print(RESULT + json.dumps({"notebook": label, "ok": ok, "seconds": round(secs, 1), "error": err,
                                             "doc_errors": doc_errors}), flush=True)
        for e in doc_errors: print(f"warning: {label}: show_doc for the docs failed: {e}", file=sys.stderr)
        if ok: print(f"executed {label} in {secs:.1f} s → {executed_path(label).relative_to(ROOT)}", flush=True)
        else: failed += 1; print(err, file=sys.stderr, flush=True)
    if len(paths) == 1: report(paths[0], _run_one(paths[0], flags, timeout))
    else:
        for label, res in run_pool([(p, (p, flags, False, timeout)) for p in paths], jobs): report(label, res)
    print(f"{len(paths) - failed} of {len(paths)} notebooks passed in {time.time() - t:.1f} s (flags: {' '.join(flags) or 'none'})")
    return 1 if failed else 0


def _run_one(nb, flags, timeout):
    "One notebook in this process (`--execute NB`); an executor failure is a failed run, as in the pool."
    try: return execute_nb(nb, flags, timeout=timeout)
    except Exception as e:
        import traceback
        return False, 0.0, f"{_rel(nb)}: {type(e).__name__}: {e}\n{traceback.format_exc()}", []


# ------------------------------------------------------------------------------------------------ 2. nbdev processing
def _add_tag(cell, tag):
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    if tag not in tags: tags.append(tag)


def process_nb(nb_path: Path, exec_path: Path):
    "nbdev's processors on the executed copy of `nb_path`, with hiding done by tags; the outputs are kept."
    from execnb.nbio import read_nb, nb2dict, mk_cell
    from nbdev.config import get_config
    from nbdev.process import NBProcessor
    from nbdev.frontmatter import FrontmatterProc
    from nbdev.processors import populate_language, add_show_docs, hide_line, rm_header_dash
    flags = set(get_config().get("tst_flags", "").split())
    nb = read_nb(exec_path)
    nb.path_ = str(nb_path)
    full = (nb.metadata.get("lkt_exec") or {}).get("mode") == "full"
    # keep the directives in the source for now (rm_directives=False): we read them, tag, then strip them
    proc = NBProcessor(nb=nb, procs=[FrontmatterProc, populate_language, add_show_docs, hide_line, rm_header_dash],
                       rm_directives=False)
    proc.process()
    cells = []
    fm = getattr(nb, "frontmatter_", {}) or {}
    for c in nb.cells:
        if c.cell_type == "raw" and c.source.lstrip().startswith("---"): continue   # the frontmatter FrontmatterProc made
        if c.cell_type == "code":
            meta = c.setdefault("metadata", {})
            not_run = meta.pop("lkt_not_run", False)
            meta.pop("lkt_inserted", None)
            d = _directives(c.source)
            src_nodir = _strip_directives(c.source)
            hidden = bool({"hide", "default_exp", "exporti"} & d.keys()) or d.get("include", "").lower() == "false"
            if hidden: _add_tag(c, "remove-cell")
            if _showdoc_re.search(src_nodir) or getattr(c, "has_sd", False) or d.get("echo", "").lower() == "false":
                _add_tag(c, "remove-input")
            if d.get("output", "").lower() == "false": _add_tag(c, "remove-output")
            skipped_by_flag = d.get("eval", "").lower() == "false" or bool(flags & d.keys())
            if full and not_run and skipped_by_flag: _add_tag(c, "lkt-not-run")   # shown as "not executed"
            c.source = src_nodir
            c.execution_count = None
        cells.append(c)
    title = fm.get("title") or nb_path.stem
    head = f"# {title}\n"
    if fm.get("description"): head += f"\n> {fm['description']}\n"
    cells.insert(0, mk_cell(head, "markdown"))
    nb.cells = cells
    d = nb2dict(nb)
    orig_ids = {c.get("id") for c in json.loads(nb_path.read_text(encoding="utf-8"))["cells"]}
    for i, c in enumerate(d["cells"]):
        if c.get("id") not in orig_ids: c["id"] = f"lkt-{i}-" + hashlib.sha1(str(c.get("source")).encode()).hexdigest()[:8]
        for k in [k for k in c if k.endswith("_") or k in ("idx_", "has_sd")]: c.pop(k, None)
        if isinstance(c.get("source"), list): c["source"] = "".join(c["source"])
        if c["cell_type"] == "markdown": c.pop("outputs", None); c.pop("execution_count", None)
        c.get("metadata", {}).pop("language", None)
    d["metadata"] = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                     "language_info": {"name": "python"}, "lkt_title": title}
    d.setdefault("nbformat", 4); d.setdefault("nbformat_minor", 5)
    return d


# ----------------------------------------------------------------------------------------------- 3. post-processing
_doc_url = None


def _doc_prefix():
    global _doc_url
    if _doc_url is None:
        from nbdev.config import get_config
        cfg = get_config()
        _doc_url = (cfg.doc_host.rstrip("/") + "/" + cfg.doc_baseurl.strip("/") + "/").replace("//", "/").replace(":/", "://")
    return _doc_url


def _relink(md, pages, anchors):
    """nbdev doc URLs of this project → relative; `NN_name.ipynb` (also `../nbs/…`, `../evals/…`, so the link works in
    Jupyter too) → `name.html`; a link to a page or anchor that the site does not have (a private helper, an excluded
    notebook) is replaced by its text."""
    md = md.replace(_doc_prefix(), "")
    def nb_link(m):
        target, anchor = m.group(1), m.group(2) or ""
        nb = next((d / target for d in (ROOT / "nbs", ROOT / "evals") if (d / target).exists()), None)
        p = page_name(nb) if nb else None
        return f"]({p}.html{anchor})" if p in pages else m.group(0)
    md = re.sub(r"\]\((?:\./)?(?:\.\./(?:nbs|evals)/)?([\w.-]+\.ipynb)(#[^)\s]*)?\)", nb_link, md)
    def check(m):
        text, page, anchor = m.group(1), m.group(2), m.group(3)
        if page in ALIASES and anchor and anchor[1:] in anchors.get(ALIASES[page], ()):
            return f"[{text}]({ALIASES[page]}.html{anchor})"           # an nbdev link into a renamed page
        if page not in anchors: return text
        if anchor and anchor[1:] not in anchors[page]: return text
        return m.group(0)
    return re.sub(r"\[([^\]]*)\]\(([\w.-]+)\.html(#[^)\s]*)?\)", check, md)


_sd_src_re = re.compile(r"^\[source\]\([^)]*\)(\{[^}]*\})?\s*$", re.MULTILINE)
_sd_head_re = re.compile(r"^(#{2,4})\s+(.+?)\s*$", re.MULTILINE)


def _clean_showdoc(md, anchors):
    "show_doc markdown → no leading rule, no remote source link, a stable anchor `name.lower()` as nbdev's index uses."
    md = re.sub(r"^\s*---\s*\n", "", md)
    md = _sd_src_re.sub("", md)
    def head(m):
        name = re.sub(r"[`*\\]", "", m.group(2)).strip()
        anchor = name.lower()
        anchors.add(anchor)
        return (f'<span class="lkt-api-anchor" id="{html.escape(anchor)}"></span>\n\n'
                f'<p class="rubric lkt-api-name"><code>{html.escape(name)}</code>'
                f'<a class="headerlink" href="#{html.escape(anchor)}" title="Link to this definition">#</a></p>\n')
    return _sd_head_re.sub(head, md, count=1)


def clean_outputs(d):
    "Pass 1: stream outputs without ANSI codes; show_doc outputs cleaned and given anchors. Returns the anchors."
    anchors = set()
    for c in d["cells"]:
        c["source"] = _src(c["source"])
        if c["cell_type"] != "code": continue
        tags = c.get("metadata", {}).get("tags", [])
        for o in c.get("outputs", []):
            if o.get("output_type") == "stream": o["text"] = _ansi.sub("", _src(o["text"]))
            data = o.get("data", {})
            if "text/markdown" in data and "remove-input" in tags and _showdoc_re.search(c["source"]):
                data["text/markdown"] = _clean_showdoc(_src(data["text/markdown"]), anchors)
                data.pop("text/plain", None)
        if "lkt-not-run" in tags and "remove-cell" not in tags: tags.append("lkt-slow")
    return anchors


def link_markdown(d, pages, anchors, linker):
    "Pass 2: nbdev's `add_links` on markdown cells and markdown outputs, then links made relative and checked."
    for c in d["cells"]:
        if c["cell_type"] == "markdown":
            src = c["source"]
            c["source"] = _relink((linker.linkify(src) if linker and src.strip() else None) or src, pages, anchors)  # linkify("") is None
        for o in c.get("outputs", []):
            data = o.get("data", {})
            if "text/markdown" in data: data["text/markdown"] = _relink(_src(data["text/markdown"]), pages, anchors)


# ------------------------------------------------------------------------------------------------ 4. generated pages
def _first_line(o):
    doc = inspect.getdoc(o) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _sig(o):
    try: s = str(inspect.signature(o))
    except (TypeError, ValueError): return ""
    s = re.sub(r"\s+", " ", s)
    return s if len(s) <= 120 else s[:117] + "…"


def api_page(page_anchors, nb_pages):
    "Markdown for the API reference: every name in each module's `__all__` plus the public methods of classes."
    modidx = importlib.import_module(f"{LIB}._modidx").d["syms"]
    out = ["# API reference", "",
           "Every exported public name of `local_knowledge_trainer`, generated from the library's `_modidx.py` and each "
           "module's `__all__`. Each name links to its `show_doc` entry in the notebook that defines it.", ""]
    n = 0
    for mod in sorted(modidx):
        try: m = importlib.import_module(mod)
        except Exception as e: raise SystemExit(f"docs build: cannot import {mod} for the API reference: {e}")
        public = list(getattr(m, "__all__", []))
        if not public: continue
        syms = modidx[mod]
        page = None
        for k, (url, _) in syms.items(): page = url.split(".html")[0]; break
        page = ALIASES.get(page, page)
        title = nb_pages.get(page, page)
        out += [f"## `{mod}`", "", f"Notebook: [{title}]({page}.html)" if page in page_anchors else "", "",
                '<table class="lkt-api-table docutils align-default"><thead><tr><th>name</th><th>kind</th>'
                '<th>signature / summary</th></tr></thead><tbody>']
        rows = []
        for name in public:
            obj = getattr(m, name, None)
            rows.append((name, obj))
            if inspect.isclass(obj) and obj.__module__ == mod:
                for mn, mo in vars(obj).items():
                    if mn.startswith("_") or f"{mod}.{name}.{mn}" not in syms: continue
                    rows.append((f"{name}.{mn}", getattr(obj, mn, mo)))
        for name, obj in rows:
            kind = ("class" if inspect.isclass(obj) else "function" if callable(obj) else
                    "property" if isinstance(obj, property) else type(obj).__name__)
            anchor = name.lower()
            if page in page_anchors and anchor in page_anchors[page]: href = f"{page}.html#{anchor}"
            elif page in page_anchors: href = f"{page}.html"
            else: href = None
            label = f"<code>{html.escape(name)}</code>"
            cell = f'<a href="{href}">{label}</a>' if href else label
            sig = _sig(obj) if callable(obj) else ""
            summ = html.escape(_first_line(obj)) if (callable(obj) or isinstance(obj, property)) else ""
            out.append(f"<tr><td>{cell}</td><td>{kind}</td><td><code>{html.escape(sig)}</code>"
                       f"{'<br>' if sig and summ else ''}{summ}</td></tr>")
            n += 1
        out += ["</tbody></table>", ""]
    return "\n".join(out) + "\n", n


def _demote(md):
    "Demote markdown headings by one level (outside code fences) so an included file nests under our page title."
    res, fence = [], False
    for line in md.splitlines():
        if line.lstrip().startswith(("```", "~~~")): fence = not fence
        res.append("#" + line if not fence and re.match(r"^#{1,5}\s", line) else line)
    return "\n".join(res)


def _flatten(x, prefix=""):
    if isinstance(x, dict):
        for k, v in x.items(): yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(x, list) and x and all(isinstance(v, (dict, list)) for v in x):
        for i, v in enumerate(x): yield from _flatten(v, f"{prefix}[{i}]")
    else: yield prefix, x


def results_page():
    out = ["# Benchmarks and evaluation", "",
           "The latest numbers committed to the repository, copied in when the site is built.", "", "## Benchmarks", ""]
    res = ROOT / "bench" / "RESULTS.md"
    if res.exists():
        out += [f"From `bench/RESULTS.md` (written by `bench/run_all.py`).", "", _demote(res.read_text(encoding="utf-8")), ""]
    else:
        out += ["```{note}", "No benchmark results yet. Produce them with", "", "    .venv/bin/python bench/run_all.py", "",
                "which writes `bench/RESULTS.md` and `bench/RESULTS.json`; rebuild the site with `make docs`.", "```", ""]
    out += ["## Evaluation", ""]
    base = ROOT / "evals" / "baseline.json"
    if base.exists():
        try: data = json.loads(base.read_text(encoding="utf-8"))
        except ValueError as e: raise SystemExit(f"docs build: evals/baseline.json is not valid JSON: {e}")
        rows = list(_flatten(data))
        out += ["From `evals/baseline.json`.", "",
                '<table class="docutils align-default"><thead><tr><th>metric</th><th>value</th></tr></thead><tbody>']
        for k, v in rows[:2000]:
            if isinstance(v, float): v = f"{v:.4g}"
            elif isinstance(v, list): v = ", ".join(map(str, v[:20])) + (" …" if len(v) > 20 else "")
            out.append(f"<tr><td><code>{html.escape(k)}</code></td><td>{html.escape(str(v))}</td></tr>")
        out += ["</tbody></table>", ""]
    else:
        out += ["```{note}", "No evaluation baseline yet (`evals/baseline.json`). The evaluation notebooks in `evals/` "
                "write it; rebuild the site with `make docs` afterwards.", "```", ""]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------------------- helpers
def write_if_changed(path: Path, text: str):
    "Keep mtimes of unchanged sources, so Sphinx rebuilds only what changed."
    if path.exists() and path.read_text(encoding="utf-8") == text: return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def toctree(caption, pages):
    return "\n".join(["```{toctree}", ":hidden:", ":maxdepth: 1", f":caption: {caption}", "", *pages, "```", ""])


def copy_plot(readme_image: bool):
    "Copy the first PNG of the statistics page to _site/_static/lkt-plot.png (and, if asked, to nbs/_docs/)."
    page = OUT / f"{PLOT_PAGE}.html"
    if not page.exists(): return None
    m = re.search(r'<img[^>]+src="(_images/[^"]+\.png)"', page.read_text(encoding="utf-8"))
    if not m: return None
    src = OUT / m.group(1)
    dst = OUT / "_static" / "lkt-plot.png"
    shutil.copy2(src, dst)
    if readme_image: shutil.copy2(src, README_IMAGE); log(f"README image updated: {README_IMAGE.relative_to(ROOT)}")
    return dst


_span_re = re.compile(r'<span class="lkt-api-anchor" id="([^"]+)"></span>')


def dedupe_anchors():
    "Drop a show_doc anchor when the page already has that id (a markdown heading named like the symbol)."
    for p in OUT.glob("*.html"):
        s = p.read_text(encoding="utf-8")
        if "lkt-api-anchor" not in s: continue
        ids = re.findall(r'\sid="([^"]+)"', s)
        span_ids = _span_re.findall(s)
        seen = set()
        def drop(m):
            i = m.group(1)
            if ids.count(i) - span_ids.count(i) > 0 or i in seen: return ""   # a heading has it, or an earlier span
            seen.add(i); return m.group(0)
        new = _span_re.sub(drop, s)
        if new != s: p.write_text(new.replace("<p></p>\n", ""), encoding="utf-8")


def main(argv=None):
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true",
                    help="for notebooks without an executed copy, run only what nbdev runs for docs (imports, exports, show_doc)")
    ap.add_argument("--fresh", action="store_true", help="ignore the executed copies and Sphinx's cache: rebuild everything")
    ap.add_argument("--execute", nargs="+", metavar="NOTEBOOK",
                    help="only execute these notebooks as nbdev_test does and write their copies to build/executed/ "
                         "(what tests/test_notebooks.py runs); exit 1 when a cell fails")
    ap.add_argument("--flags", default="", help="test flags to run anyway, like nbdev_test --flags (LKT_SLOW=1 adds slow)")
    ap.add_argument("--jsonl", action="store_true",
                    help=f"with --execute: print each notebook's result as one line, {RESULT.strip()} + JSON, as it ends")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="notebooks executed at once")
    ap.add_argument("--timeout", type=int, default=None,
                    help="seconds allowed per cell (default: no limit, as nbdev_test; a slow machine is not a failure)")
    ap.add_argument("--out", default=str(ROOT / "_site"), help="output folder (default _site/)")
    ap.add_argument("--readme-image", action="store_true", help=f"also copy the plot to {README_IMAGE.relative_to(ROOT)}")
    ap.add_argument("--exclude", nargs="*", default=os.environ.get("LKT_DOCS_EXCLUDE", "").split(), metavar="PAGE",
                    help="leave these pages out, e.g. a notebook still being written (env LKT_DOCS_EXCLUDE)")
    ap.add_argument("--no-warnings-as-errors", dest="strict", action="store_false")
    a = ap.parse_args(argv)
    OUT = Path(a.out).resolve()
    t0 = time.time()
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))

    flags = forced_flags(a.flags)
    if a.execute: return execute_main([str(Path(p).resolve()) for p in a.execute], flags, a.jobs, a.timeout, a.jsonl)

    nbs = notebooks()
    pages = {page_name(p): p for p in nbs if page_name(p) not in a.exclude}
    log(f"{len(nbs)} notebooks: {', '.join(pages)}")
    from nbdev.doclinks import _nbpath2html
    ALIASES.update({_nbpath2html(Path(p.name)).stem: pg for pg, p in pages.items()
                    if p.parent == ROOT / "nbs" and _nbpath2html(Path(p.name)).stem != pg})
    copies = ensure_executed(pages, a.fast, a.fresh, a.jobs, a.timeout, flags)
    t1 = time.time()
    executed = {pg: process_nb(pages[pg], copies[pg]) for pg in pages}
    t2 = time.time()

    try:
        from nbdev.doclinks import NbdevLookup
        linker = NbdevLookup()
    except Exception as e:
        log(f"note: nbdev links disabled ({e})"); linker = None
    if a.fresh and SRC.exists(): shutil.rmtree(SRC)
    SRC.mkdir(parents=True, exist_ok=True)
    page_anchors, titles, wanted = {}, {}, set()
    for pg, d in executed.items():
        page_anchors[pg] = clean_outputs(d)
        titles[pg] = d["metadata"].get("lkt_title", pg)
    site_anchors = {**page_anchors, "api": set(), "results": set()}
    for pg, d in executed.items(): link_markdown(d, pages, site_anchors, linker)
    nb_pages = [pg for pg in pages if pg != "index" and not pg.startswith("evals-")]
    ev_pages = [pg for pg in pages if pg.startswith("evals-")]
    extra = toctree("Notebooks", nb_pages) + (toctree("Evaluations", ev_pages) if ev_pages else "") + \
            toctree("Reference", ["api", "results"])
    if "index" in executed:
        executed["index"]["cells"].append({"cell_type": "markdown", "id": "lkt-toctree", "metadata": {}, "source": extra})
    else:
        write_if_changed(SRC / "index.md", "# Local Knowledge Trainer\n\n" + extra); wanted.add("index.md")
    for pg, d in executed.items():
        write_if_changed(SRC / f"{pg}.ipynb", json.dumps(d, indent=1, ensure_ascii=False) + "\n"); wanted.add(f"{pg}.ipynb")
    api_md, n_api = api_page(page_anchors, titles)
    write_if_changed(SRC / "api.md", api_md); wanted.add("api.md")
    write_if_changed(SRC / "results.md", results_page()); wanted.add("results.md")
    for p in SRC.iterdir():                           # pages of deleted notebooks
        if p.is_file() and p.name not in wanted: p.unlink()

    # a page removed or added (or --fresh): start Sphinx from scratch so no stale page or toctree survives in _site/
    manifest, listing = WORK / "pages.json", json.dumps(sorted(wanted))
    if a.fresh or not manifest.exists() or manifest.read_text() != listing:
        shutil.rmtree(OUT, ignore_errors=True); shutil.rmtree(DOCTREES, ignore_errors=True)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(DOCS), "-d", str(DOCTREES),
           "-j", "1", str(SRC), str(OUT)]
    if a.strict: cmd[3:3] = ["-W", "--keep-going"]
    if a.fresh: cmd.insert(3, "-E")
    log("sphinx:", " ".join(cmd[3:]))
    r = subprocess.run(cmd, cwd=ROOT)
    if r.returncode:
        manifest.unlink(missing_ok=True)   # the next build starts clean, so every warning shows again
        raise SystemExit(f"docs build: sphinx failed (exit {r.returncode}); see the warnings above")
    manifest.write_text(listing)
    dedupe_anchors()
    t3 = time.time()
    plot = copy_plot(a.readme_image)
    log(f"API reference: {n_api} public names; plot for README: {plot.relative_to(OUT) if plot else 'none found'}")
    log(f"done in {t3 - t0:.1f} s (execute {t1 - t0:.1f} s, process {t2 - t1:.1f} s, sphinx {t3 - t2:.1f} s) → {OUT}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
