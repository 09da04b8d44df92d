#!/usr/bin/env python
"""Build the LKT documentation site offline: nbdev processing → cached execution → Sphinx + myst-nb → `_site/`.

    .venv/bin/python nbs/_docs/build.py            # full build: executes the notebooks (cached), then Sphinx -W
    .venv/bin/python nbs/_docs/build.py --fast     # only the cells nbdev itself runs for docs (imports, exports, show_doc)
    .venv/bin/python nbs/_docs/build.py --fresh    # ignore every cache (execution and Sphinx)

Pipeline (Quarto is not needed; `nbdev_docs` keeps working for those who have it):
1. nbdev processing, per notebook, with nbdev 2.4.14's own processors (`FrontmatterProc`, `add_show_docs`, `hide_line`,
   `rm_header_dash`, `add_links`, …). Where nbdev would *delete* a cell for Quarto (`#| hide`, `#| default_exp`,
   `#| exporti`, `show_doc` inputs) this build *tags* it instead (`remove-cell`, `remove-input`), so the notebook can still
   be executed as a whole; `#| export` cells are shown as code. `#| slow` / `#| eval: false` cells are not executed.
2. Execution with nbclient (a real ipykernel, cwd = the notebook's folder, inline PNG plots), 2 notebooks at a time.
   Cached in build/docs/exec/: a notebook re-runs only when its processed cells, the library's source or the
   build mode changed. The committed notebooks stay output-free, so `nbdev_clean` leaves the tree unchanged.
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
SRC, EXEC, DOCTREES = WORK / "src", WORK / "exec", WORK / "doctrees"
OUT = ROOT / "_site"
README_IMAGE = DOCS / "readme_plot.png"           # committed copy of one plot, shown by README.md
PLOT_PAGE = "hypothesis"                          # the page whose first plot becomes _static/lkt-plot.png
EXEC_VERSION = "1"                                # bump to invalidate every cached execution
LIB = "local_knowledge_trainer"

_dir_re = re.compile(r"^\s*#\s*\|\s*(.*?)\s*$")
_showdoc_re = re.compile(r"^show_doc\(", re.MULTILINE)


def log(*a): print("[docs]", *a, flush=True)


# ---------------------------------------------------------------------------------------------------------- inputs
def notebooks():
    "Notebooks in site order: index, numbered notebooks in nbs/, then evals/ notebooks."
    skip = lambda p: p.name.startswith(("_", ".")) or ".ipynb_checkpoints" in p.parts
    nbs = [ROOT / "nbs" / "index.ipynb"] if (ROOT / "nbs" / "index.ipynb").exists() else []
    nbs += sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if p.name != "index.ipynb" and not skip(p))
    nbs += sorted(p for p in (ROOT / "evals").rglob("*.ipynb") if not skip(p) and not any(
        q.startswith(("_", ".")) for q in p.relative_to(ROOT / "evals").parts[:-1]))
    return nbs


def page_name(nb: Path):
    "Page name as nbdev/Quarto names it (`00_core.ipynb` → `core`), so `_modidx.py` URLs resolve; evals get `evals-`."
    from nbdev.doclinks import _nbpath2html
    stem = _nbpath2html(Path(nb.name)).stem
    return stem if nb.parent == ROOT / "nbs" else "evals-" + stem


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
    src = "\n".join(_strip_directives(c["source"]) for c in nb_dict["cells"] if c["cell_type"] == "code")
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


# ------------------------------------------------------------------------------------------------ 1. nbdev processing
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


def _add_tag(cell, tag):
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    if tag not in tags: tags.append(tag)


def _fast_eval(c, d, src):
    "In --fast mode run what show_doc needs: export cells and cells made only of imports (nbdev also runs mixed ones)."
    if {"export", "exports", "exec_doc"} & d.keys(): return True
    try: tree = ast.parse(src)
    except SyntaxError: return False
    return bool(tree.body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body)


def process_nb(nb_path: Path, fast: bool):
    "nbdev's processors on the notebook, with hiding done by tags so the result still executes top to bottom."
    from execnb.nbio import read_nb, nb2dict, mk_cell
    from nbdev.config import get_config
    from nbdev.process import NBProcessor
    from nbdev.frontmatter import FrontmatterProc
    from nbdev.processors import populate_language, add_show_docs, hide_line, rm_header_dash
    flags = set(get_config().get("tst_flags", "").split())
    nb = read_nb(nb_path)
    nb.path_ = str(nb_path)
    # keep the directives in the source for now (rm_directives=False): we read them, tag, then strip them
    proc = NBProcessor(nb=nb, procs=[FrontmatterProc, populate_language, add_show_docs, hide_line, rm_header_dash],
                       rm_directives=False)
    proc.process()
    cells = []
    fm = getattr(nb, "frontmatter_", {}) or {}
    for c in nb.cells:
        if c.cell_type == "raw" and c.source.lstrip().startswith("---"): continue   # the frontmatter FrontmatterProc made
        if c.cell_type == "code":
            d = _directives(c.source)
            src_nodir = _strip_directives(c.source)
            hidden = bool({"hide", "default_exp", "exporti"} & d.keys()) or d.get("include", "").lower() == "false"
            if hidden: _add_tag(c, "remove-cell")
            if _showdoc_re.search(src_nodir) or getattr(c, "has_sd", False) or d.get("echo", "").lower() == "false":
                _add_tag(c, "remove-input")
            if d.get("output", "").lower() == "false": _add_tag(c, "remove-output")
            no_exec = d.get("eval", "").lower() == "false" or bool(flags & d.keys())
            if fast and not no_exec:
                no_exec = not (_showdoc_re.search(src_nodir) or getattr(c, "has_sd", False) or _fast_eval(c, d, src_nodir))
            if no_exec: _add_tag(c, "skip-execution")
            if d.get("eval", "").lower() == "false" or bool(flags & d.keys()): _add_tag(c, "lkt-not-run")
            c.source = src_nodir
            c.outputs, c.execution_count = [], None
        cells.append(c)
    title = fm.get("title") or nb_path.stem
    head = f"# {title}\n"
    if fm.get("description"): head += f"\n> {fm['description']}\n"
    cells.insert(0, mk_cell(head, "markdown"))
    cells.insert(1, mk_cell("from nbdev.showdoc import show_doc", "code"))
    _add_tag(cells[1], "remove-cell")
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


# ---------------------------------------------------------------------------------------------------- 2. execution
def _execute(args):
    "Run one processed notebook in a fresh process with execnb's CaptureShell, the engine `nbdev_test` uses."
    nb_dict, nb_path, dest, key, timeout = args
    from execnb.nbio import dict2nb, nb2str
    from execnb.shell import CaptureShell
    from fastcore.xtras import working_directory
    for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                 "IN_TEST": "1"}.items(): os.environ[k] = v          # as nbdev_test runs them
    nb = dict2nb(nb_dict)
    skip = lambda c: c.cell_type != "code" or "skip-execution" in c.get("metadata", {}).get("tags", [])
    t = time.time()
    k = CaptureShell(nb_path, mpl_format="retina", timeout=timeout)   # inline matplotlib whatever MPLBACKEND says
    try:
        with working_directory(Path(nb_path).parent): k.run_all(nb, exc_stop=True, preproc=skip)
    except BaseException:
        msg = _ansi.sub("", k.prettytb(fname=nb_path))
        i = getattr(k, "_cell_idx", 0) - 1
        if 0 <= i < len(nb.cells): msg = f"failing cell:\n{nb.cells[i].source}\n\n{msg}"
        return dest, None, msg if len(msg) < 5000 else msg[:2000] + "\n[…]\n" + msg[-3000:]
    nb.metadata["lkt_docs_key"] = key
    Path(dest).write_text(nb2str(nb), encoding="utf-8")
    return dest, time.time() - t, None


def execute_all(prepared, fast, fresh, jobs, timeout):
    EXEC.mkdir(parents=True, exist_ok=True)
    todo, results = [], {}
    for page, (nb_path, d) in prepared.items():
        key = hashlib.sha256((EXEC_VERSION + lib_hash(d) + ("fast" if fast else "full") +
                              json.dumps(d, sort_keys=True)).encode()).hexdigest()
        dest = EXEC / f"{page}{'.fast' if fast else ''}.ipynb"
        if not fresh and dest.exists():
            try:
                old = json.loads(dest.read_text(encoding="utf-8"))
                if old.get("metadata", {}).get("lkt_docs_key") == key:
                    results[page] = old; continue
            except Exception: pass
        todo.append((page, (d, str(nb_path), str(dest), key, timeout)))
    log(f"execution: {len(prepared) - len(todo)} cached, {len(todo)} to run ({'fast' if fast else 'full'} mode, {jobs} at a time)")
    errors = []
    if todo:
        # one fresh process per notebook: IPython takes over `__main__` in the process that runs a notebook
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"), max_tasks_per_child=1) as ex:
            futs = {ex.submit(_execute, a): page for page, a in todo}
            for f in as_completed(futs):
                page = futs[f]
                dest, secs, err = f.result()
                if err: errors.append(f"{page}: {err}"); log(f"FAILED {page}"); continue
                log(f"executed {page} in {secs:.1f} s")
                results[page] = json.loads(Path(dest).read_text(encoding="utf-8"))
    if errors:
        raise SystemExit("docs build: notebook execution failed:\n" + "\n\n".join(errors))
    return results


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
    """nbdev doc URLs of this project → relative; `NN_name.ipynb` → `name.html`; a link to a page or anchor that the site
    does not have (a private helper, an excluded notebook) is replaced by its text."""
    md = md.replace(_doc_prefix(), "")
    def nb_link(m):
        target, anchor = m.group(1), m.group(2) or ""
        p = page_name(Path(target))
        return f"]({p}.html{anchor})" if p in pages else m.group(0)
    md = re.sub(r"\]\((?:\./)?(?:\.\./nbs/)?([\w.-]+\.ipynb)(#[^)\s]*)?\)", nb_link, md)
    def check(m):
        text, page, anchor = m.group(1), m.group(2), m.group(3)
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


_ansi = re.compile(r"\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")


def _src(x): return "".join(x) if isinstance(x, list) else x


def clean_outputs(d, fast):
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
        if "lkt-not-run" in tags and "remove-cell" not in tags and not fast: tags.append("lkt-slow")
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
    ap.add_argument("--fast", action="store_true", help="execute only what nbdev runs for docs (imports, exports, show_doc)")
    ap.add_argument("--fresh", action="store_true", help="ignore the execution cache and rebuild every page")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="notebooks executed at once")
    ap.add_argument("--timeout", type=int, default=900, help="seconds allowed per cell")
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

    nbs = notebooks()
    pages = {page_name(p): p for p in nbs if page_name(p) not in a.exclude}
    log(f"{len(nbs)} notebooks: {', '.join(pages)}")
    prepared = {pg: (p, process_nb(p, a.fast)) for pg, p in pages.items()}
    t1 = time.time()
    executed = execute_all(prepared, a.fast, a.fresh, a.jobs, a.timeout)
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
        page_anchors[pg] = clean_outputs(d, a.fast)
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
        d["metadata"].pop("lkt_docs_key", None)
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
    log(f"done in {t3 - t0:.1f} s (process {t1 - t0:.1f} s, execute {t2 - t1:.1f} s, sphinx {t3 - t2:.1f} s) → {OUT}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
