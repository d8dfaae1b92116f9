"""c3.sh: the KG_PIN_PV_WAIT mode with the lowest geometric mean of time / mode 1 over the A/B's rows
(tile_ab --json: one row a shape and pass); 3 when none is 1 % faster (the GPU tests then cover the
latest pin)."""
import json
import math
import statistics
import sys

ratios = {2: [], 3: []}
for path in sys.argv[1:]:
    try:
        rows = json.load(open(path))
    except (OSError, ValueError):
        continue
    for r in rows:
        us = r.get("us", {})
        if "p1" in us:
            for m in ratios:
                ratios[m].append(us[f"p{m}"] / us["p1"])
geo = {m: math.exp(statistics.fmean(math.log(x) for x in v)) for m, v in ratios.items() if v}
print(f"ratios {ratios} geomean {geo}", file=sys.stderr)
best = min(geo, key=geo.get) if geo else 3
print(best if geo and geo[best] < 0.99 else 3)
