#!/usr/bin/env python3
"""Run ETOM's published evaluator (`eval/eval.py` + `eval/graph_evaluator.py` of a checkout of
the ETOM repository, not shipped with benchgen) on a predictions file, for the side-by-side
benchmark in docs/scoring.md.

eval.py has no prediction-file input: its runner asks an LLM orchestrator for each query. This
driver replaces the orchestrator by a replay of `{id: "L<level>-<query_id>", prediction}`
records and runs, per level file, exactly what the runner runs per query and at the end:
`json.load` of the level file (`load_queries`), `process_single_query` (strategy.evaluate,
with the runner's `processing_error` for a query without prediction) and
`calculate_statistics`, then prints the headline figures. Left out: the thread pool, the
checkpoint file rewritten every 10 queries, progress printing, and the results file.

    etom_eval_replay.py ETOM_DIR PREDICTIONS.jsonl level_1.json [level_2.json …]
"""
import importlib.util
import json
import os
import re
import sys
import types


def load_eval(etom_dir):
    eval_dir = os.path.join(etom_dir, "eval")
    # The orchestrators need LLM endpoints and embedding models; none is called here.
    orch = types.ModuleType("orchestrator")
    for name in ("ToolShedOrchestrator", "MCPZeroOrchestrator", "REACTOrchestrator", "HybridOrchestrator",
                 "OrchestratorConfig", "LLMConfig"):
        setattr(orch, name, type(name, (), {}))
    orch.setup_colored_logging = lambda *a, **k: None
    sys.modules["orchestrator"] = orch
    try:
        import dotenv  # noqa: F401
    except ImportError:
        dotenv = types.ModuleType("dotenv")
        dotenv.load_dotenv = lambda *a, **k: False
        sys.modules["dotenv"] = dotenv
    sys.path.insert(0, eval_dir)
    spec = importlib.util.spec_from_file_location("etom_eval", os.path.join(eval_dir, "eval.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Replay:
    """Stands in for the orchestrator: returns the recorded prediction of the current query."""

    MISSING = object()

    def __init__(self):
        self.current = Replay.MISSING

    def process_query(self, query, **_):
        if self.current is Replay.MISSING:
            raise KeyError("no prediction for this query")
        return self.current


def main():
    etom_dir, pred_path, *levels = sys.argv[1:]
    ev = load_eval(etom_dir)
    preds = {}
    with open(pred_path) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                preds[str(rec["id"])] = rec.get("prediction")
    replay = Replay()
    for path in levels:
        level = int(re.search(r"level_?([1-5])", os.path.basename(path)).group(1))
        with open(path, "r") as f:
            queries = json.load(f)
        strategy = ev.get_strategy(level)
        evaluations, latencies = [], []
        for i, q in enumerate(queries):
            replay.current = preds.get(f"L{level}-{q.get('query_id')}", Replay.MISSING)
            _, evaluation, ok, _, latency = ev.process_single_query(replay, q, i, strategy)
            evaluations.append(evaluation)
            if ok and latency is not None:
                latencies.append(latency)
        stats = ev.calculate_statistics(evaluations, level, latencies)
        summary, perf = stats.get("summary", {}), stats.get("performance", {})
        m, s = perf.get("metrics", {}), perf.get("support", {})
        print(f"L{level}: N {summary.get('total_queries', 0)}, EM {summary.get('exact_match_rate', 0):.4f}, "
              f"P {m.get('precision', 0):.4f}, R {m.get('recall', 0):.4f}, F1 {m.get('f1', 0):.4f} "
              f"over {perf.get('sample_size', 0)}, TP/FP/FN {s.get('tp', 0)}/{s.get('fp', 0)}/{s.get('fn', 0)}, "
              f"status {json.dumps(summary.get('status_counts', {}), sort_keys=True)}")


if __name__ == "__main__":
    main()
