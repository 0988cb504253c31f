"""Summarize jobs benchmark runs: python summarize.py DIR... -> markdown table rows."""
import json, sys, pathlib
rows = []
for d in sys.argv[1:]:
    p = pathlib.Path(d)
    r = json.loads((p / "results.json").read_text())["benchmarks"]["jobs"]
    lv = {l["clients"]: l for l in r["levels"]}
    o = r["oneshot"]
    cells = [p.name, str(r.get("settings") or "defaults")]
    for c in (1, 8, 64, 256):
        l = lv[c]
        cells.append(f"{l['per_s']:.0f} ({l['p50_ms']:.1f}/{l['p99_ms']:.1f})")
    cells.append(f"{o['per_s']:.0f} ({o['p50_ms']:.1f}/{o['p99_ms']:.1f})")
    cells.append(str(sum(l["mismatches"] for l in r["levels"]) + o["mismatches"]))
    cells.append(str(sum(l["errors"] for l in r["levels"]) + o["errors"]))
    cells.append(str(sum(l["completed"] for l in r["levels"]) + o["completed"]))
    rows.append("| " + " | ".join(cells) + " |")
print("| run | settings | 1 client jobs/s (p50/p99 ms) | 8 | 64 | 256 | one-shot 64 clients req/s (p50/p99) | wrong forests | errors | forests checked |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
print("\n".join(rows))
