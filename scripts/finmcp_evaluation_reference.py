#!/usr/bin/env python3
"""FinMCP's eval/evaluation.py as ../shared/docs/reference-pipelines.md (C.5) describes it,
written from that description (not the published code). It pins the figures of
tests/it/score_compat.rs::compat_finmcp_equals_evaluation_py_with_missing_ids_and_repeats:

    BENCHGEN_DUMP_FINMCP_FIXTURE=/tmp/d cargo test --locked --test it score_compat::compat_finmcp_equals
    python3 scripts/finmcp_evaluation_reference.py /tmp/d/eval.json

Each record is scored on its own fields; `id` is never read. Records with a truthy `error`
are dropped; a missing key (KeyError) skips the record.
"""
import json
import sys
from collections import Counter, defaultdict


def extract(messages):
    names = []
    for m in messages:
        if m.get("tool_calls"):
            for c in m["tool_calls"]:
                names.append(str(c["function"]["name"]))
    return names


def div(a, b):
    return a / b if b else 0


def instance(r):
    scenery = r["scenery"]
    level = r["diff_level"]["level"]
    gold = extract(r["messages"])
    pred = extract(r["messages_pred"])
    task = r.get("task", "any").replace(" ", "_")
    g, p = Counter(gold), Counter(pred)
    tp = sum((g & p).values())
    fp = sum(max(0, p[k] - g[k]) for k in p)
    fn = sum(max(0, g[k] - p[k]) for k in g)
    prec, rec = div(tp, tp + fp), div(tp, tp + fn)
    f1 = div(2 * prec * rec, prec + rec)
    keys = {"class_Level1": scenery.split("-")[0], "difficulty": str(level), "task": task}
    return keys, (tp, fp, fn, prec, rec, f1, 1 if pred == gold else 0)


def figures(rows):
    n = len(rows)
    mp = sum(r[3] for r in rows) / n
    mr = sum(r[4] for r in rows) / n
    mf = sum(r[5] for r in rows) / n
    tp, fp, fn = (sum(r[i] for r in rows) for i in range(3))
    up, ur = div(tp, tp + fp), div(tp, tp + fn)
    uf = div(2 * up * ur, up + ur)
    cons = sum(r[6] for r in rows) / n
    return n, [mp, mr, mf, up, ur, uf, cons]


def main():
    records = json.load(open(sys.argv[1]))
    groups = defaultdict(list)
    for r in records:
        if r.get("error"):
            continue
        try:
            keys, row = instance(r)
        except KeyError:
            continue
        groups[("overall", "all")].append(row)
        for dim, key in keys.items():
            groups[(dim, key)].append(row)
    order = ["overall", "class_Level1", "difficulty", "task"]
    for (dim, key) in sorted(groups, key=lambda k: (order.index(k[0]), k[1].encode())):
        n, f = figures(groups[(dim, key)])
        cells = ", ".join('"%.4f"' % x for x in f)
        print('    ("%s", "%s", %d, [%s]),' % (dim, key, n, cells))


if __name__ == "__main__":
    main()
