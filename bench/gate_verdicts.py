"""Does the ingest gate's verdict say what it shows? Cases with a known answer, built from ../shared/data.

Prints ONE JSON object on stdout (progress goes to stderr) and saves it to bench/measured/gate_verdicts.json. Data: the
BEIR-layout collections in <repo>/../shared/data (cisi, cacm, pt_faquad, zh_cmrc2018_dev; absent ones are skipped).
Every random choice is seeded by content (`probes.content_seed` of the collection's texts and the case's name), never
by a path. Embeddings: the packaged all-MiniLM-L6-v2 through `beir.beir_embedder` (cached under ~/.cache/lkt/beir).

Bases (`held_back_base`): a seeded sample of a collection (one chunk per document) without its held-back documents;
labelled probes are its judged queries, relevance over the base and the held-back documents (a query none of whose
documents is in either is 0 before and after, and is left out). Each group is judged in batches of 10 (BH across a
batch), as an ingest of 10 files would be.

* never improved, on the English base (`--base` CISI abstracts): documents in invented vocabularies (each its own,
  reused across its sentences; half with English function words between the invented ones), exact copies of stored
  abstracts under new names, light paraphrases (seeded word drops and swaps of neighbours), Portuguese (pt_faquad)
  and Chinese (zh_cmrc2018_dev) texts of about 1,200 words; the invented ones again without labelled probes;
* should improve: held-back documents relevant to at least 5 judged queries (the fewest with which a one-sided
  sign-flip test can reach p <= 0.05) — CISI abstracts on the English base, and pt_faquad and zh_cmrc2018_dev
  paragraphs on bases of `--qa-base` paragraphs of their own collection; power = the share "improved", with its Wilson
  interval, per collection and pooled;
* power, reported: CISI abstracts relevant to 1-4 judged queries, and every should-improve group again without
  labelled probes (the base's own held-out probes cannot be answered by a new document: "new topic" at best).

The text floor: the share of word tokens in the wordfreq list of their language (`gate.text_check`) on 300 documents
of 20+ words from each collection, against 400 invented-vocabulary texts; `gate.TEXT_FLOOR` must lie between them.

  .venv/bin/python bench/gate_verdicts.py [--base 300] [--qa-base 200] [--held 24] [--out bench/measured/gate_verdicts.json]
"""
import argparse, json, os, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np


def log(*a): print(*a, file=sys.stderr, flush=True)


def text_of(doc): return (doc["title"] + "\n" + doc["text"]).strip()


def invented_text(seed, function_words=False, n_sent=10, n_vocab=40):
    "A text in its own consistent invented vocabulary (optionally with English function words between the invented ones)."
    r = np.random.default_rng(seed)
    syl = lambda: r.choice(list("bcdfghjklmnpqrstvwz")) + r.choice(list("aeiou")) + (r.choice(["", "r", "n", "l", "s"]) if function_words else "")
    voc = ["".join(syl() for _ in range(int(r.integers(2, 4)))) for _ in range(n_vocab)]
    fw = "the of and to in is that for with as on by this from are".split()
    word = lambda: r.choice(fw) if function_words and r.random() < 0.4 else r.choice(voc)
    return " ".join(" ".join(word() for _ in range(int(r.integers(9, 16)))).capitalize() + "." for _ in range(n_sent))


def paraphrase(text, seed, drop=0.1, swap=0.1):
    "A light paraphrase: each word dropped with probability `drop`, then neighbours swapped with probability `swap`."
    r = np.random.default_rng(seed)
    w = [x for x in text.split() if r.random() >= drop]
    for i in range(len(w) - 1):
        if r.random() < swap: w[i], w[i + 1] = w[i + 1], w[i]
    return " ".join(w)


def long_text(corpus, ids, words=1200):
    "Documents of a collection joined in order until about `words` words (count_words)."
    from local_knowledge_trainer.text import count_words
    out, n = [], 0
    for i in ids:
        t = corpus[i]["text"].strip()
        out.append(t); n += count_words(t)
        if n >= words: break
    return "\n\n".join(out)


def text_floor(seed):
    "Known-word shares (text_check) of real documents per collection and of invented-vocabulary texts."
    from local_knowledge_trainer.beir import load_beir
    from local_knowledge_trainer.gate import text_check, TEXT_FLOOR, TEXT_MIN_WORDS
    from local_knowledge_trainer.probes import content_seed
    out = {"floor": TEXT_FLOOR, "min_words": TEXT_MIN_WORDS, "real": {}, "invented": {}}
    for name in ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev"):
        if not (SHARED / name / "corpus.jsonl").exists(): continue
        corpus, _, _ = load_beir(SHARED / name)
        ids = sorted(corpus)
        pick = np.random.default_rng(content_seed(name, *(corpus[i]["text"] for i in ids))).permutation(len(ids))[:300]
        checks = [text_check(text_of(corpus[ids[j]])) for j in pick]
        sh = np.array([c["known"] for c in checks if c["words"] is not None and c["words"] >= TEXT_MIN_WORDS])
        out["real"][name] = {"documents": int(len(sh)), "languages": sorted({c["language"] for c in checks if c["language"]}),
                             "min": round(float(sh.min()), 4), "q0.01": round(float(np.quantile(sh, 0.01)), 4),
                             "median": round(float(np.median(sh)), 4), "below_floor": int((sh < TEXT_FLOOR).sum())}
    for fw in (False, True):
        sh = np.array([text_check(invented_text(content_seed("floor", str(seed), str(fw), str(j)), fw))["known"] for j in range(200)])
        out["invented"]["with function words" if fw else "invented words only"] = {
            "documents": 200, "max": round(float(sh.max()), 4), "median": round(float(np.median(sh)), 4), "at_or_above_floor": int((sh >= TEXT_FLOOR).sum())}
    lo = min(v["min"] for v in out["real"].values()); hi = max(v["max"] for v in out["invented"].values())
    out["gap"] = [hi, lo]; out["floor_in_gap"] = bool(hi < TEXT_FLOOR <= lo)
    return out


def judged_docs(qrels):
    "Judged queries per document (positive grades)."
    out = {}
    for rel in qrels.values():
        for d, g in rel.items():
            if g > 0: out[d] = out.get(d, 0) + 1
    return out


def held_back_base(name, n_base, n_held, min_q):
    "A base of a seeded sample of a collection, `n_held` documents with >= min_q judged queries held back, and its labelled probes."
    from types import SimpleNamespace
    from local_knowledge_trainer.beir import load_beir, beir_embedder
    from local_knowledge_trainer.core import Chunk, chunk_id
    from local_knowledge_trainer.index import KnowledgeBase
    from local_knowledge_trainer.probes import content_seed
    corpus, queries, qrels = load_beir(SHARED / name)
    ids = sorted(corpus)
    seed = content_seed(name, *(text_of(corpus[i]) for i in ids))
    rng = np.random.default_rng(seed)
    judged = judged_docs(qrels)
    many = [i for i in ids if judged.get(i, 0) >= min_q]
    few = [i for i in ids if 0 < judged.get(i, 0) < min_q]
    held_many = [many[j] for j in sorted(rng.permutation(len(many))[:n_held])]
    held_few = [few[j] for j in sorted(rng.permutation(len(few))[:n_held])]
    rest = [i for i in ids if i not in set(held_many) | set(held_few)]
    base_ids = [rest[j] for j in sorted(rng.permutation(len(rest))[:n_base])]
    src = lambda i: f"{name}/{i}.txt"
    one = lambda s, t: SimpleNamespace(source=s, chunks=[Chunk(chunk_id(s, t), t, s)], format="text")
    emb = beir_embedder()
    chunks = [one(src(i), text_of(corpus[i])).chunks[0] for i in base_ids]
    kb = KnowledgeBase.from_chunks(chunks, emb, X=emb.embed_texts([c.text for c in chunks], progress=False))
    present = {src(i) for i in base_ids + held_many + held_few}
    labelled = [{"id": q, "query": queries[q], "relevant": {src(d): g for d, g in rel.items() if g > 0 and src(d) in present}} for q, rel in qrels.items()]
    labelled = [c for c in labelled if c["relevant"]]   # a query none of whose documents is here is 0 before and after: no difference
    log(f"{name}: base of {len(base_ids)}, held back {len(held_many)} with >= {min_q} judged queries and {len(held_few)} with fewer; "
        f"{len(labelled)} labelled probes")
    return SimpleNamespace(name=name, corpus=corpus, kb=kb, emb=emb, seed=seed, base_ids=base_ids, labelled=labelled, src=src, one=one,
                           held_many=[one(src(i), text_of(corpus[i])) for i in held_many],
                           held_few=[one(src(i), text_of(corpus[i])) for i in held_few])


def judge(B, docs, labelled, per_batch):
    "Gate rows of `docs` on base B, in batches (BH across each)."
    from local_knowledge_trainer.gate import IngestGate
    rows = []
    for b in range(0, len(docs), per_batch):
        batch = docs[b:b + per_batch]
        X = dict(zip([c.id for d in batch for c in d.chunks], B.emb.embed_chunks([c for d in batch for c in d.chunks])))
        rows += IngestGate(B.kb, probe_queries=labelled, max_probes=None).evaluate(batch, X).rows
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=int, default=300, help="CISI abstracts in the English base")
    ap.add_argument("--qa-base", type=int, default=200, help="paragraphs in the pt_faquad and zh_cmrc2018_dev bases")
    ap.add_argument("--held", type=int, default=24, help="held-back documents per power group")
    ap.add_argument("--per-batch", type=int, default=10, help="documents judged together (BH across them)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "measured" / "gate_verdicts.json"))
    a = ap.parse_args()
    if not (SHARED / "cisi" / "corpus.jsonl").exists():
        print(json.dumps({"skipped": f"no CISI collection in {SHARED}"})); return
    t0 = time.perf_counter()
    from local_knowledge_trainer.beir import load_beir
    from local_knowledge_trainer.signflip import min_signflip_n
    from local_knowledge_trainer.contingency import wilson_ci
    from local_knowledge_trainer.parser import DocumentParser
    from local_knowledge_trainer.probes import content_seed
    m = min_signflip_n(0.05)
    en = held_back_base("cisi", a.base, a.held, m)
    tmp = Path(tempfile.mkdtemp(prefix="lkt-gate-bench-"))
    parser = DocumentParser(chunk_size=512, chunk_overlap=64, **en.emb.window_args)
    def parsed(name, text):
        f = tmp / name; f.write_text(text, encoding="utf-8")
        return [d for d in parser.parse(f) if d.ok]
    have = {n: (SHARED / n / "corpus.jsonl").exists() for n in ("pt_faquad", "zh_cmrc2018_dev")}
    def foreign(name, j):
        corp, _, _ = load_beir(SHARED / name); order = sorted(corp)
        perm = np.random.default_rng(content_seed(name, str(j), *(corp[i]["text"] for i in order))).permutation(len(order))
        return parsed(f"{name}_{j}.txt", long_text(corp, [order[p] for p in perm], 1200))
    base_text = lambda i: text_of(en.corpus[i])
    copies = [en.base_ids[j] for j in np.random.default_rng(content_seed("copy", str(en.seed))).permutation(len(en.base_ids))[:4]]
    paras = [en.base_ids[j] for j in np.random.default_rng(content_seed("paraphrase", str(en.seed))).permutation(len(en.base_ids))[:4]]
    groups = {   # name: (base, documents, labelled probes or None)
        "invented vocabulary": (en, [d for j in range(8) for d in parsed(f"invented_{j}.txt", invented_text(content_seed("invented", str(en.seed), str(j)), j % 2 == 1))], en.labelled),
        "copy of a stored abstract": (en, [en.one(f"copies/{i}.txt", base_text(i)) for i in copies], en.labelled),
        "light paraphrase of a stored abstract": (en, [en.one(f"paraphrases/{i}.txt", paraphrase(base_text(i), content_seed("paraphrase", base_text(i)))) for i in paras], en.labelled),
        "Portuguese text (pt_faquad) on the English base": (en, [d for j in range(2) for d in foreign("pt_faquad", j)] if have["pt_faquad"] else [], en.labelled),
        "Chinese text (zh_cmrc2018_dev) on the English base": (en, [d for j in range(2) for d in foreign("zh_cmrc2018_dev", j)] if have["zh_cmrc2018_dev"] else [], en.labelled),
        "invented vocabulary, no labelled probes": (en, None, None),
        f"cisi: held back, >= {m} judged queries": (en, en.held_many, en.labelled),
        f"cisi: held back, 1-{m - 1} judged queries": (en, en.held_few, en.labelled),
        f"cisi: held back, >= {m} judged queries, no labelled probes": (en, en.held_many, None),
    }
    groups["invented vocabulary, no labelled probes"] = (en, groups["invented vocabulary"][1], None)
    qa = {n: held_back_base(n, a.qa_base, a.held, m) for n in ("pt_faquad", "zh_cmrc2018_dev") if have[n]}
    for n, B in qa.items():
        groups[f"{n}: held back, >= {m} judged queries"] = (B, B.held_many, B.labelled)
        groups[f"{n}: held back, >= {m} judged queries, no labelled probes"] = (B, B.held_many, None)
    NEVER = [g for g in groups if not g.split(":")[0] in ("cisi", "pt_faquad", "zh_cmrc2018_dev")]
    SHOULD = [f"{n}: held back, >= {m} judged queries" for n in ("cisi", *qa)]
    cases, summary = [], {}
    for name, (B, docs, labelled) in groups.items():
        t = time.perf_counter()
        rows = judge(B, docs, labelled, a.per_batch)
        counts = {}
        for r in rows: counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        imp = counts.get("improved", 0)
        ci = wilson_ci(imp, len(rows)) if rows else None
        summary[name] = {"base": B.name, "n": len(rows), "labelled_probes": len(labelled) if labelled else 0, "verdicts": counts, "improved": imp,
                         "improved_rate": round(imp / len(rows), 4) if rows else None,
                         "improved_ci95": [round(ci.low, 4), round(ci.high, 4)] if ci else None,
                         "gain_answers_median": float(np.median([r.get("gain_answers") or 0 for r in rows])) if rows else None,
                         "gain_up_median": float(np.median([r.get("gain_up") or 0 for r in rows])) if rows else None,
                         "gain_up_at_least_min": sum(1 for r in rows if (r.get("gain_up") or 0) >= m),
                         "harm": {h: sum(1 for r in rows if (r["harm"] or "").split(":")[0] == h) for h in sorted({(r["harm"] or "").split(":")[0] for r in rows})},
                         "seconds": round(time.perf_counter() - t, 1)}
        log(f"{name}: {counts} ({summary[name]['seconds']} s)")
        for r in rows:
            cases.append({"group": name, "source": r["source"], "verdict": r["verdict"], "text": r["text"], "language": r["language"],
                          "known": None if r["known"] is None else round(r["known"], 4), "words": r.get("text_words"),
                          "gain_answers": r.get("gain_answers"), "gain_up": r.get("gain_up"), "gain_down": r.get("gain_down"), "gain_mean": None if r.get("gain_mean") is None else round(r["gain_mean"], 4),
                          "gain_p": r.get("gain_p"), "gain_q": r.get("gain_q"), "novelty_n": r.get("novelty_n"), "novelty_q": r.get("novelty_q"),
                          "duplicate_of": r.get("duplicate_of"), "harm": r["harm"]})
    floor = text_floor(en.seed)
    power = {g: {"improved": summary[g]["improved"], "n": summary[g]["n"], "rate": summary[g]["improved_rate"], "ci95": summary[g]["improved_ci95"],
                 f"with_{m}_or_more_probes_up": summary[g]["gain_up_at_least_min"]}
             for g in groups if g.split(":")[0] in ("cisi", "pt_faquad", "zh_cmrc2018_dev")}
    pooled = sum(summary[g]["improved"] for g in SHOULD), sum(summary[g]["n"] for g in SHOULD)
    ci = wilson_ci(*pooled)
    out = {
        "benchmark": "gate_verdicts", "alpha": 0.05, "per_batch": a.per_batch,
        "bases": {B.name: {"documents": len(B.base_ids), "labelled_probes": len(B.labelled)} for B in (en, *qa.values())},
        "rule": "improved only where the base's probes improve (labelled judged queries); invented vocabulary, copies, paraphrases "
                "and foreign-language texts on the English base must never be improved",
        "never_improved": {g: summary[g]["improved"] for g in NEVER}, "never_improved_ok": all(summary[g]["improved"] == 0 for g in NEVER),
        "should_improve": {"groups": SHOULD, "improved": pooled[0], "n": pooled[1], "rate": round(pooled[0] / pooled[1], 4),
                           "ci95": [round(ci.low, 4), round(ci.high, 4)], "at_least_half": pooled[0] / pooled[1] >= 0.5},
        "power_note": f"a one-sided sign-flip test needs at least {m} probes that rise (its least p is 2^-m); BH across each batch of "
                      f"{a.per_batch} then asks p <= 0.05 * rank / {a.per_batch}",
        "power": power, "groups": summary, "text_floor": floor, "cases": cases, "elapsed_s": round(time.perf_counter() - t0, 1),
    }
    js = json.dumps(out, indent=1, ensure_ascii=False)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(js + "\n", encoding="utf-8")
    print(js)


if __name__ == "__main__":
    main()
