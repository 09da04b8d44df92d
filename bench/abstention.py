"""Abstention rates of the answer confidence at several thresholds, on a shared BEIR collection used as the base.

Usage: python bench/abstention.py NAME [MAX_QUERIES]   (NAME: cisi | cacm | pt_faquad | zh_cmrc2018_dev)
Prints ONE JSON object: for each threshold, the share of answered questions (hit@5), missed questions, on-topic
unanswerable questions (their qrels-relevant documents removed) and off-topic questions (25 judged queries of each other
shared collection) whose confidence falls below it. 19_confidence chooses ABSTAIN_BELOW from these rates.
"""
import sys, json, numpy as np
from pathlib import Path
from local_knowledge_trainer.beir import BeirIndex, load_beir
from local_knowledge_trainer.golden import GoldenCase
from local_knowledge_trainer import confidence as C
name, maxq = sys.argv[1], int(sys.argv[2])
root = Path("/work/shared/data")
bi = BeirIndex(root/name, max_queries=maxq, progress=False); kb = bi.kb
df = C.measure_confidence(kb, bi.cases, k=5)
un = C.measure_confidence(kb, bi.cases, k=5, drop_relevant=True)
off = []
for o in ("cisi", "cacm", "pt_faquad", "zh_cmrc2018_dev"):
    if o == name: continue
    _, qs, _ = load_beir(root/o)
    for q in list(qs.values())[:25]: off.append(C.answer_confidence(kb, q).confidence)
off = np.array(off)
out = {}
for t in (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5):
    out[t] = {"hits": round(float((df.confidence[df.hit == 1] < t).mean()), 3), "misses": round(float((df.confidence[df.hit == 0] < t).mean()), 3),
              "unanswerable": round(float((un.confidence < t).mean()), 3), "off_topic": round(float((off < t).mean()), 3)}
print(json.dumps({"collection": name, "abstention_rate_below": out}), flush=True)
