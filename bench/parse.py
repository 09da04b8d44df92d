"""Parser throughput: pages/s and MB/s over the shared PDFs, files/s, MB/s and chunks/s over a generated ~5 MB mixed corpus.

Run from the repo root: `.venv/bin/python bench/parse.py`. Prints ONE JSON object on stdout. Seeded; no timed assertions.
"""
import json, os, platform, random, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # works without `pip install -e .`
from local_knowledge_trainer.parser import DocumentParser, summarize  # noqa: E402

SEED = 0
WORDS = ("retrieval index chunk vector query answer model token corpus document statistic confidence interval sample "
         "parser section page table column embedding lexical dense fusion rank score baseline drift quality").split()
PT = "conhecimento aprendizado busca documento pergunta resposta modelo estatística confiança amostra".split()
ZH = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经"

def sentence(rng, n=None):
    n = n or rng.randint(6, 18)
    return " ".join(rng.choice(WORDS + PT) for _ in range(n)).capitalize() + "."

def para(rng, k=None): return " ".join(sentence(rng) for _ in range(k or rng.randint(2, 6)))

def gen_md(rng, i):
    out = [f"# Guide {i}\n", para(rng), ""]
    for s in range(rng.randint(3, 8)):
        out += [f"## Section {s}\n", para(rng), "", "```python", "# not a heading", "x = 1", "```", "", f"### Detail {s}.1\n", para(rng), ""]
    return "\n".join(out)

def gen_py(rng, i):
    out = [f'"""Module {i}: {sentence(rng)}"""', "import os", ""]
    for c in range(rng.randint(2, 5)):
        out += [f"class C{c}:", f'    """{sentence(rng)}"""']
        for m in range(rng.randint(2, 6)):
            out += [f"    def m{m}(self, x):", f'        """{sentence(rng)}"""', f"        return x + {m}", ""]
    for f in range(rng.randint(2, 6)):
        out += [f"def f{f}(a, b):", f'    """{sentence(rng)}"""', "    return a * b", ""]
    return "\n".join(out)

def gen_java(rng, i):
    out = ["package bench;", "", f"/** {sentence(rng)} */", f"public class K{i} {{", "    private int n;"]
    for m in range(rng.randint(3, 10)):
        out += [f"    /** {sentence(rng)} */", f"    public int m{m}(int x) {{", f'        String s = "{{}}";', f"        return x + {m};", "    }"]
    return "\n".join(out + ["}"])

def gen_sql(rng, i):
    out = []
    for t in range(rng.randint(3, 8)):
        out += [f"-- {sentence(rng)}", f"CREATE TABLE t{i}_{t} (id INT PRIMARY KEY, note TEXT DEFAULT 'a;b');"]
        out += [f"INSERT INTO t{i}_{t} (id, note) VALUES ({r}, '{sentence(rng)}');" for r in range(rng.randint(3, 12))]
        out += [f"SELECT id FROM t{i}_{t} WHERE note LIKE '%;%';"]
    return "\n".join(out)

def gen_txt(rng, i):
    if i % 4 == 0: return "\n\n".join("".join(rng.choice(ZH) for _ in range(rng.randint(80, 300))) + "。" for _ in range(20))
    return "\n\n".join(para(rng) for _ in range(rng.randint(10, 40)))

GENS = {"md": gen_md, "py": gen_py, "java": gen_java, "sql": gen_sql, "txt": gen_txt}

def make_corpus(root:Path, target_bytes:int=5_000_000, seed:int=SEED)->int:
    rng, total, i = random.Random(seed), 0, 0
    while total < target_bytes:
        for ext, g in GENS.items():
            data = g(rng, i).encode("utf-8")
            p = root / ext / f"f{i:05d}.{ext}"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data); total += len(data)
        i += 1
    return total

def timed(parser, path):
    t = time.perf_counter()
    docs = parser.parse(path)
    return docs, time.perf_counter() - t

def main():
    out = {"bench": "parse", "seed": SEED, "python": platform.python_version(), "chunk_size": 512, "chunk_overlap": 64}
    parser = DocumentParser(512, 64)
    pdfs = ROOT.parent / "shared" / "data" / "pdfs"
    if pdfs.exists():
        files = sorted(pdfs.rglob("*.pdf"))
        mb = sum(p.stat().st_size for p in files) / 1e6
        t = time.perf_counter()
        docs = [parser.parse_file(p) for p in files]
        dt = time.perf_counter() - t
        pages = sum(int(d.metadata.get("pages") or 0) for d in docs)
        out["pdf"] = {"files": len(files), "pages": pages, "MB": round(mb, 3), "seconds": round(dt, 3),
                      "pages_per_s": round(pages / dt, 2), "MB_per_s": round(mb / dt, 3),
                      "chunks": sum(len(d.chunks) for d in docs), "failed": sum(d.status == "failed" for d in docs),
                      "per_file_s": None}
        per = {}
        for p in files:
            t = time.perf_counter(); parser.parse_file(p); per[p.name] = round(time.perf_counter() - t, 3)
        out["pdf"]["per_file_s"] = per
    else:
        out["pdf"] = None
    with tempfile.TemporaryDirectory(prefix="lkt_bench_parse_") as d:
        root = Path(d)
        nbytes = make_corpus(root)
        docs, dt = timed(parser, root)
        n_chunks = sum(len(x.chunks) for x in docs)
        out["mixed"] = {"files": len(docs), "MB": round(nbytes / 1e6, 3), "seconds": round(dt, 3),
                        "files_per_s": round(len(docs) / dt, 1), "MB_per_s": round(nbytes / 1e6 / dt, 3),
                        "chunks": n_chunks, "chunks_per_s": round(n_chunks / dt, 1),
                        "by_format": {r["format"]: {k: r[k] for k in ("files", "parsed", "failed", "chunks")} for r in summarize(docs)}}
        fmt_t = {}
        for ext in GENS:
            _, t = timed(parser, root / ext)
            mb = sum(p.stat().st_size for p in (root / ext).iterdir()) / 1e6
            fmt_t[ext] = {"seconds": round(t, 3), "MB_per_s": round(mb / t, 3)}
        out["mixed"]["per_format"] = fmt_t
    print(json.dumps(out, ensure_ascii=False))

if __name__ == "__main__":
    main()
