"""Language identification for routing: today's stop-word `lexical.query_language` against packaged language-ID models.

Prints ONE JSON object on stdout (progress goes to stderr). Labels are LKT's routing labels: zh, ja, ko, en, pt or other.

Sets (gold label in brackets):
  queries   ../shared/data/{cisi,cacm}/queries.jsonl [en], pt_faquad [pt], zh_cmrc2018_dev [zh]: every question.
  passages  the same collections' corpus.jsonl (title + text), every document.
  mixed     the 39 mixed-script and borrowed-title questions pinned in nbs/06_lexical.ipynb (their pinned labels).
  po        short real UI sentences: the msgid/msgstr pairs of Sphinx's installed translations (sphinx/locale/*/sphinx.po),
            msgstr of es, fr, de, it, nl, ca, ro, pl, sv, tr, cs, id [other], pt_BR + pt_PT [pt], zh_CN [zh], ja [ja],
            ko [ko], and the English msgid [en]; placeholders (%s, {0}) and markup stripped, >= 3 words kept, at most
            150 per language (first by msgid order), so the set is deterministic.
Methods:
  query_language      lexical.query_language (stop-word votes after own_words, script rules for CJK)
  py3langid           py3langid restricted to en, pt, zh, ja, ko (never 'other')
  py3langid_open      py3langid over its 97 languages; a language outside en/pt/zh/ja/ko is 'other'
  lingua              lingua restricted to en, pt, zh, ja, ko; an undecided text (None) is 'other'
  lingua_open         lingua over en, pt, zh, ja, ko + es, fr, de, it, nl, ca, ro, pl, sv, tr, cs, id (the po languages);
                      a language outside the five is 'other' (lingua over all 75 languages took too long to load here)
  identify_language   text.identify_language: script rules for CJK (text.detect_language), then py3langid restricted to
                      21 Latin-script languages with the 'other' and no-evidence rules (text.latin_language)
  query_language_model  lexical.query_language with text.latin_language (the model) instead of the stop-word votes
  query_language_hybrid the proposed lexical.query_language: today's rule, except that a text py3langid gives to a
                      third language with probability >= text.OTHER_CONFIDENCE is 'other' (the stop-word votes still
                      decide en vs pt: they are right on the pinned mixed questions where the model is not)
Per method and set: accuracy, the confusion counts, and the first 8 errors; import/build time and mean per-call latency.

  .venv/bin/python bench/langid.py [--limit N]
"""
import argparse, json, re, sys, time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
GOLD = {"cisi": "en", "cacm": "en", "pt_faquad": "pt", "zh_cmrc2018_dev": "zh"}
ROUTED = ("en", "pt", "zh", "ja", "ko")
PO_LANGS = {"es": "other", "fr": "other", "de": "other", "it": "other", "nl": "other", "ca": "other", "ro": "other",
            "pl": "other", "sv": "other", "tr": "other", "cs": "other", "id": "other",
            "pt_BR": "pt", "pt_PT": "pt", "zh_CN": "zh", "ja": "ja", "ko": "ko"}

MIXED = [  # the pinned cases of nbs/06_lexical.ipynb (query_language)
    ("What is the payback period of the solar array?", "en"), ("Qual enzima fixa o dióxido de carbono no ciclo de Calvin?", "pt"),
    ("Quais são os custos de frete", "pt"), ("乌龙茶的产地在哪里？", "zh"), ("すしの作り方", "ja"), ("한국어 문서", "ko"),
    ("FAISS HNSW efSearch", "en"), ("Straße Köln Berlin", "other"),
    ("「Deep Learning」这本书的作者是谁?", "zh"), ("《Introduction to Information Retrieval》的作者是谁？", "zh"),
    ("“The Art of Computer Programming”是谁写的？", "zh"), ("谁写了Introduction to Information Retrieval这本书？", "zh"),
    ("Geoffrey Hinton在哪所大学工作？", "zh"), ("如何用requests.get()设置超时？", "zh"), ("HTTPBasicAuth和HTTPDigestAuth有什么区别？", "zh"),
    ("`click.option` 的 default 参数是做什么的？", "zh"), ("支持向量机（support vector machine）是什么？", "zh"),
    ("什么是 attention mechanism in transformers", "zh"), ("GPU驱动", "zh"),
    ("Como configurar o timeout do HTTPAdapter no requests?", "pt"), ("Qual a diferença entre machine learning e deep learning?", "pt"),
    ("Quem escreveu \"The Art of Computer Programming\"?", "pt"), ("Quem escreveu The Art of Computer Programming?", "pt"),
    ("O que faz o decorator @click.option com o parâmetro default?", "pt"),
    ("O que Claude Shannon desenvolveu no artigo A Mathematical Theory of Communication?", "pt"), ("Quem criou o Mark I?", "pt"),
    ("O que significa R & D?", "pt"), ("Explique o módulo de autenticação", "pt"), ("Como definir uma opção de linha de comando com click?", "pt"),
    ("Who is 李白?", "en"), ("Is 北京大学 in Beijing?", "en"), ("What did 毛泽东 write about guerrilla warfare?", "en"),
    ("The word 茶 means tea in Chinese", "en"), ("What does the character 茶 (chá) mean?", "en"),
    ("What does \"saudade\" mean in Portuguese?", "en"), ("Who wrote The Art of Computer Programming?", "en"),
    ("Explain the authentication module", "en"), ("「Deep Learning」の著者は誰ですか", "ja"), ("Python 설치 방법은 무엇입니까?", "ko"),
]


def log(*a): print(*a, file=sys.stderr, flush=True)


def jsonl(path, limit=None):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip(): out.append(json.loads(line))
            if limit and len(out) >= limit: break
    return out


_PLACE = re.compile(r"%\([^)]*\)[sdr]|%[sdr]|\{[^}]*\}|<[^>]*>|&[a-z]+;|[`*\\]")


def po_pairs(path):
    "(msgid, msgstr) pairs of a .po file (singular messages, non-empty translation)."
    from babel.messages.pofile import read_po
    with open(path, "rb") as f: cat = read_po(f)
    return [(m.id, m.string) for m in cat if m.id and isinstance(m.id, str) and isinstance(m.string, str) and m.string]


def clean(s): return " ".join(_PLACE.sub(" ", s).split())


def po_set(per_lang=150):
    import sphinx
    loc = Path(sphinx.__file__).parent / "locale"
    items, en = [], {}
    for lang, gold in PO_LANGS.items():
        p = loc / lang / "LC_MESSAGES" / "sphinx.po"
        if not p.exists(): continue
        n = 0
        for mid, mstr in sorted(po_pairs(p)):
            s = clean(mstr)
            if len(s.split()) >= 3 or (gold in ("zh", "ja", "ko") and len(s) >= 4):
                items.append((s, gold)); n += 1
                m = clean(mid)
                if len(m.split()) >= 3: en.setdefault(m, "en")
            if n >= per_lang: break
    return items + sorted(en.items())[:per_lang]


def datasets(limit):
    sets = {}
    if all((SHARED / n / "queries.jsonl").exists() for n in GOLD):
        sets["queries"] = {n: [(r["text"], g) for r in jsonl(SHARED / n / "queries.jsonl", limit)] for n, g in GOLD.items()}
        sets["passages"] = {n: [(((r.get("title") or "") + "\n" + r["text"]).strip(), g) for r in jsonl(SHARED / n / "corpus.jsonl", limit)]
                            for n, g in GOLD.items()}
    else: log(f"{SHARED} missing: only the mixed and po sets")
    sets["mixed"] = {"06_lexical": MIXED}
    try: sets["po"] = {"sphinx": po_set()}
    except ImportError: log("sphinx or babel missing: no po set")
    return sets


def query_language_model(text):
    "lexical.query_language with py3langid (text.latin_language) in place of the stop-word votes for Latin text."
    from local_knowledge_trainer.lexical import route_language
    from local_knowledge_trainer.text import latin_language
    return route_language(text, latin=lambda toks, own, full: latin_language(own))


def query_language_hybrid(text):
    "The proposed lexical.query_language: as today, except that py3langid's confident third language (text.language_ranking) is 'other'."
    from local_knowledge_trainer import lexical as L
    from local_knowledge_trainer.text import language_ranking, OTHER_CONFIDENCE
    def latin(toks, own, full):
        rank = language_ranking(full)
        if rank and rank[0][0] not in ("en", "pt") and rank[0][1] >= OTHER_CONFIDENCE: return "other"
        return L._latin_language(toks, own, full)
    return L.route_language(text, latin=latin)


def methods():
    "name -> (label function, seconds to import and build)."
    out = {}
    t = time.perf_counter()
    from local_knowledge_trainer.lexical import query_language
    out["query_language"] = (query_language.__wrapped__, time.perf_counter() - t)

    t = time.perf_counter()
    from py3langid.langid import LanguageIdentifier, MODEL_FILE
    closed = LanguageIdentifier.from_model_file(MODEL_FILE); closed.set_languages(list(ROUTED))
    out["py3langid"] = (lambda s: closed.classify(s)[0], time.perf_counter() - t)
    t = time.perf_counter()
    opened = LanguageIdentifier.from_model_file(MODEL_FILE)
    out["py3langid_open"] = (lambda s: (lambda l: l if l in ROUTED else "other")(opened.classify(s)[0]), time.perf_counter() - t)

    t = time.perf_counter()
    from lingua import Language, LanguageDetectorBuilder
    five = [Language.ENGLISH, Language.PORTUGUESE, Language.CHINESE, Language.JAPANESE, Language.KOREAN]
    det = LanguageDetectorBuilder.from_languages(*five).with_preloaded_language_models().build()
    iso = lambda l: l.iso_code_639_1.name.lower() if l is not None else "other"
    out["lingua"] = (lambda s: iso(det.detect_language_of(s)), time.perf_counter() - t)
    t = time.perf_counter()
    more = five + [Language.SPANISH, Language.FRENCH, Language.GERMAN, Language.ITALIAN, Language.DUTCH, Language.CATALAN,
                   Language.ROMANIAN, Language.POLISH, Language.SWEDISH, Language.TURKISH, Language.CZECH, Language.INDONESIAN]
    det2 = LanguageDetectorBuilder.from_languages(*more).with_preloaded_language_models().build()
    out["lingua_open"] = (lambda s: (lambda l: l if l in ROUTED else "other")(iso(det2.detect_language_of(s))), time.perf_counter() - t)

    try:
        t = time.perf_counter()
        from local_knowledge_trainer.text import latin_language
        out["query_language_model"] = (query_language_model, time.perf_counter() - t)
        out["query_language_hybrid"] = (query_language_hybrid, 0.0)
    except ImportError: pass
    try:
        t = time.perf_counter()
        from local_knowledge_trainer import text as T
        if hasattr(T, "identify_language"):
            T.identify_language("warm up the model")
            out["identify_language"] = (T.identify_language.__wrapped__ if hasattr(T.identify_language, "__wrapped__") else T.identify_language,
                                        time.perf_counter() - t)
    except ImportError: pass
    return out


def import_times():
    "Cold import + first call of each package, each in a fresh interpreter."
    import subprocess
    code = {"py3langid": "import py3langid; py3langid.classify('hello world')",
            "lingua": "from lingua import Language as L, LanguageDetectorBuilder as B; "
                      "B.from_languages(L.ENGLISH, L.PORTUGUESE, L.CHINESE, L.JAPANESE, L.KOREAN).build().detect_language_of('hello world')",
            "lexical": "from local_knowledge_trainer.lexical import query_language; query_language('hello world')"}
    out = {}
    for name, c in code.items():
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", c], check=True, cwd=ROOT)
        base = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        out[name] = round((base - t) - (time.perf_counter() - base), 3)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None, help="at most N texts per collection (default: all)")
    args = ap.parse_args()
    sets, ms = datasets(args.limit), methods()
    res = {"sets": {k: {n: len(v) for n, v in d.items()} for k, d in sets.items()},
           "build_s": {m: round(b, 3) for m, (_, b) in ms.items()}, "latency_ms": {}, "accuracy": {}, "confusion": {}, "errors": {}}
    for m, (fn, _) in ms.items():
        log(m)
        calls, secs = 0, 0.0
        for setname, d in sets.items():
            for coll, items in d.items():
                key = f"{setname}/{coll}"
                conf, errs = Counter(), []
                t = time.perf_counter()
                for s, gold in items:
                    got = fn(s)
                    conf[f"{gold}->{got}"] += 1
                    if got != gold and len(errs) < 8: errs.append([s[:120], gold, got])
                dt = time.perf_counter() - t
                if setname in ("queries", "mixed", "po"): calls, secs = calls + len(items), secs + dt
                ok = sum(v for k, v in conf.items() if k.split("->")[0] == k.split("->")[1])
                res["accuracy"].setdefault(m, {})[key] = round(ok / len(items), 4)
                res["confusion"].setdefault(m, {})[key] = dict(sorted(conf.items()))
                res["errors"].setdefault(m, {})[key] = errs
                if setname == "passages":
                    res["latency_ms"].setdefault(m, {})["passage"] = round(1000 * dt / len(items), 3)
        res["latency_ms"].setdefault(m, {})["short"] = round(1000 * secs / max(calls, 1), 3)
    res["cold_import_s"] = import_times()
    print(json.dumps(res, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
