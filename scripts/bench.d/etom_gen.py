#!/usr/bin/env python3
"""Generate the side-by-side scoring input: ETOM level files (`level_1.json` … `level_5.json`)
and orchestrator-style predictions (`predictions.jsonl`, `{id: "L<level>-<query_id>",
prediction: [...]}`), in the shapes of the published files (reference-pipelines.md D.2, B.1).

Deterministic: a fixed seed, so every run scores the same bytes.

    etom_gen.py OUT_DIR [--queries N]   (default 50,000 queries over five levels, about 50 MB)
"""
import argparse
import json
import os
import random

WORDS = ("data file query user account report price stock weather image video music map route "
         "order payment invoice calendar event meeting email message note task project issue "
         "repository branch commit build test deploy server database table record index search "
         "document page link summary analysis chart metric").split()


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--queries", type=int, default=50_000)
    args = ap.parse_args()
    rng = random.Random(20260509)
    os.makedirs(args.out, exist_ok=True)
    servers = [f"Server {i} MCP" for i in range(400)]
    tools = [(servers[i % 400], f"tool_{i}") for i in range(3000)]
    desc = {t: sentence(rng, 8 + (i % 8)) for i, t in enumerate(tools)}

    def gt_tool(t, deps):
        d = {"tool_id": f"{t[0]}::{t[1]}", "server_name": t[0], "tool_name": t[1], "description": desc[t]}
        if deps is not None:
            d["dependencies"] = deps
        return d

    def selection(t):
        # What the orchestrators return: one ToolSelection as a JSON string.
        return json.dumps({"tool_name": t[1], "server": t[0],
                           "arguments_kv": [{"key": "query", "value_json": json.dumps(sentence(rng, 3))}],
                           "reasoning": sentence(rng, 8)})

    no_sentinel = json.dumps({"tool_name": "No", "server": "No", "arguments_kv": [], "reasoning": "null"})
    per_level = args.queries // 5
    preds = []
    total_bytes = 0
    for level in range(1, 6):
        queries = []
        for q in range(1, per_level + 1):
            if level == 1:
                steps = [[rng.choice(tools)]]
            elif level == 2:
                # one EFS: one row per member (ids 605+ in the published file), else one row
                k = 1 if rng.random() < 0.75 else rng.randint(2, 8)
                steps = [[t] for t in rng.sample(tools, k)]
            elif level == 3:
                steps = [[t] for t in rng.sample(tools, rng.randint(2, 6))]
            elif level == 4:
                steps = [rng.sample(tools, rng.randint(1, 3)) for _ in range(rng.randint(2, 5))]
            else:
                steps = []
            deps = [[i - 1] if i > 0 and rng.random() < 0.5 else [] for i in range(len(steps))]
            if level == 1:
                gt = [gt_tool(steps[0][0], None)]
            elif level == 3:
                gt = [gt_tool(s[0], deps[i]) for i, s in enumerate(steps)]
            else:
                gt = [[gt_tool(t, deps[i]) for t in s] for i, s in enumerate(steps)]
            rec = {"query_id": q, "query": sentence(rng, rng.randint(12, 40)),
                   "ground_truth_tools_count": len(gt), "ground_truth_tools": gt}
            if level == 3:
                rec["dependency_visualization"] = "\n".join(f"{i + 1}: {s[0][1]}" for i, s in enumerate(steps))
            queries.append(rec)
            # Prediction: 60 % oracle, 15 % perturbed, 10 % wrong tool, 7 % empty, 3 % "No",
            # 5 % a plain-text answer.
            r = rng.random()
            oracle = [rng.choice(s) for s in steps]
            if r < 0.60:
                p = [selection(t) for t in oracle]
            elif r < 0.75:
                p = [selection(t) for t in oracle if rng.random() > 0.3]
                if p and rng.random() < 0.5:
                    p.append(p[0])
                rng.shuffle(p)
            elif r < 0.85:
                p = [selection(rng.choice(tools)) for _ in range(max(1, len(oracle)))]
            elif r < 0.92:
                p = []
            elif r < 0.95:
                p = [no_sentinel]
            else:
                p = "I could not find a suitable tool for this request."
            if level == 5 and r < 0.6:
                p = [] if r < 0.3 else [no_sentinel]
            preds.append({"id": f"L{level}-{q}", "prediction": p})
        path = os.path.join(args.out, f"level_{level}.json")
        with open(path, "w") as f:
            json.dump(queries, f, indent=1, ensure_ascii=False)
        total_bytes += os.path.getsize(path)
    with open(os.path.join(args.out, "predictions.jsonl"), "w") as f:
        for p in preds:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    print(f"{per_level * 5} queries in five level files ({total_bytes / 1e6:.1f} MB), "
          f"{len(preds)} predictions ({os.path.getsize(os.path.join(args.out, 'predictions.jsonl')) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
