#!/usr/bin/env python3
"""FinMCP's eval/evaluation.py as ../shared/docs/reference-pipelines.md (C.5) states it,
written from that statement (not the published code). It pins the figures of
tests/it/score_compat.rs::compat_finmcp_equals_evaluation_py_with_missing_ids_and_repeats:

    BENCHGEN_DUMP_FINMCP_FIXTURE=/tmp/d cargo test --locked --test it score_compat::compat_finmcp_equals
    python3 scripts/finmcp_evaluation_reference.py /tmp/d/eval.json

C.5, rule by rule:
- records with a truthy `error` are dropped;
- a KeyError anywhere in a record (a missing `scenery`, `diff_level`, `diff_level.level` or
  `messages`; a gold or predicted tool call without `function`, or a `function` without
  `name`) skips the whole record;
- any other exception stops evaluation.py with no figures. This reference, like
  `benchgen score --compat finmcp`, lists such a record on stderr and leaves it out instead
  (a missing `messages_pred` is one; so are a `diff_level` that is not an object and a `task`
  that is not a string);
- names are `str(function.name)` (`null` is `None`), flattened over the whole conversation;
- groups: `scenery.split('-')[0].strip()`, `diff_level.level`, `task` with spaces as `_`.
Python's own semantics (iteration, `in`, truthiness, `str`) are the script's, so they are used
as they are.
"""
import json
import sys
from collections import Counter, defaultdict


def names(messages):
    out = []
    for m in messages:
        if "tool_calls" in m and m["tool_calls"]:
            for c in m["tool_calls"]:
                out.append(str(c["function"]["name"]))
    return out


def div(a, b):
    return a / b if b > 0 else 0


def instance(r):
    group = r["scenery"].split("-")[0].strip()
    level = r["diff_level"]["level"]
    task = r.get("task", "any").replace(" ", "_")
    gold = names(r["messages"])
    if "messages_pred" not in r:
        raise ValueError("messages_pred not found")
    pred = names(r["messages_pred"])
    hash(level)  # a group key: an unhashable level stops the script too
    g, p = Counter(gold), Counter(pred)
    tp = sum((g & p).values())
    fp = sum((p - g).values())
    fn = sum((g - p).values())
    return {"class_Level1": group, "difficulty": level, "task": task}, (tp, fp, fn, int(gold == pred))


def figures(rows):
    n = len(rows)
    per = []
    for tp, fp, fn, _ in rows:
        p, r = div(tp, tp + fp), div(tp, tp + fn)
        per.append((p, r, div(2 * p * r, p + r)))
    tp, fp, fn = (sum(r[i] for r in rows) for i in range(3))
    up, ur = div(tp, tp + fp), div(tp, tp + fn)
    return n, [
        sum(x[0] for x in per) / n,
        sum(x[1] for x in per) / n,
        sum(x[2] for x in per) / n,
        up,
        ur,
        div(2 * up * ur, up + ur),
        sum(r[3] for r in rows) / n,
    ]


def main():
    records = json.load(open(sys.argv[1]))
    groups = defaultdict(list)
    for i, r in enumerate(records, 1):
        if r.get("error", False):
            continue
        try:
            keys, row = instance(r)
        except KeyError:
            continue
        except Exception as e:  # evaluation.py would stop here
            print("record %d stops evaluation.py: %s: %s" % (i, type(e).__name__, e), file=sys.stderr)
            continue
        groups[("overall", "all")].append(row)
        for dim, key in keys.items():
            groups[(dim, str(key))].append(row)
    order = ["overall", "class_Level1", "difficulty", "task"]
    for dim, key in sorted(groups, key=lambda k: (order.index(k[0]), k[1].encode())):
        n, f = figures(groups[(dim, key)])
        cells = ", ".join('"%.4f"' % round(x, 4) for x in f)
        print('    ("%s", "%s", %d, [%s]),' % (dim, key, n, cells))


if __name__ == "__main__":
    main()
