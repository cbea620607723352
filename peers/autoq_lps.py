"""Model Optimizer's own solver on lwq's auto-quantize scores: the per-group format choice given
the same scores, byte costs and budget.

Model Optimizer's gradient AutoQuantize picks the formats with an integer program
(modelopt.torch.opt.searcher.LPS: one binary per layer and format, one format per layer, the
summed cost under the budget, the summed score minimised; pulp's CBC).  Its own search does not
run on the CPU (the dynamic NVFP4 fake quant asserts "amax must be a CUDA tensor"), so its scores
cannot be had here; this runs its solver on lwq's scores instead, for each of lwq's reports
(OUT/auto_quantize.json, one per budget): the candidates' bytes and scores as the report prints
them, the budget as lwq's solve states it (floor(bits x linear weights / 8) less the bytes of the
linears in no group; under the active_moe cost model each group's bytes times its cost weight and
bits x the weighted linear weights / 8 less those bytes, as Model Optimizer's ActiveMoECostModel
weighs them), and writes Model Optimizer's choice beside lwq's.

    .peers/venvs/modelopt/bin/python peers/autoq_lps.py OUT.json A/auto_quantize.json B/auto_quantize.json ...

OUT.json: {"what", "modelopt", "budgets": [{"bits_per_weight", "group_budget_bytes", "lwq": [...],
"modelopt": [...], "same"}]} (formats in the report's group order).
"""

import json
import math
import sys


def solve(report):
    from modelopt.torch.opt.searcher import LPS

    groups = report["groups"]
    chosen = sum(g["candidates"][g["format"]]["bytes"] for g in groups)
    fixed = report["predicted"]["linear_bytes"] - chosen  # the linears in no group
    names = [sorted(g["candidates"]) for g in groups]
    cm = report.get("cost_model")
    if cm:  # active_moe: Model Optimizer's cost weights on the costs and the budget's weights alike
        if cm["name"] != "active_moe":
            sys.exit(f"autoq_lps: cost model {cm['name']}")
        budget = report["budget"]["bits_per_weight"] * cm["weighted_linear_weights"] / 8 - fixed
        costs = [[g["candidates"][f]["bytes"] * g["cost_weight"] for f in n] for g, n in zip(groups, names)]
    else:
        budget = math.floor(report["budget"]["bits_per_weight"] * report["linear_weights"] / 8) - fixed
        costs = [[g["candidates"][f]["bytes"] for f in n] for g, n in zip(groups, names)]
    lps = LPS(name="AutoQuantize", constraints={"weight_size": budget},
              constraints_to_candidate_costs={"weight_size": costs},
              candidate_scores=[[g["candidates"][f]["score"] for f in n] for g, n in zip(groups, names)])
    sel, status = lps()
    if status != "Optimal":
        sys.exit(f"autoq_lps: Model Optimizer's solver: {status}")
    mo = [n[i] for n, i in zip(names, sel)]
    lwq = [g["format"] for g in groups]
    return {"bits_per_weight": report["budget"]["bits_per_weight"], "group_budget_bytes": budget, "lwq": lwq,
            "modelopt": mo, "same": mo == lwq}


def main():
    import modelopt

    out, reports = sys.argv[1], sys.argv[2:]
    rows = [solve(json.load(open(r))) for r in reports]
    for r in rows:
        print(f"autoq_lps: {r['bits_per_weight']} bits: {'same' if r['same'] else 'DIFFERENT'} "
              f"(lwq {r['lwq']}, Model Optimizer {r['modelopt']})")
    with open(out, "w") as f:
        json.dump({"what": "Model Optimizer's LPS on lwq's auto-quantize scores (peers/autoq_lps.py)",
                   "modelopt": modelopt.__version__, "budgets": rows}, f, indent=1)
    sys.exit(0 if all(r["same"] for r in rows) else 1)


if __name__ == "__main__":
    main()
