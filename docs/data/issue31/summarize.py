# Prints one table row per serve-bench JSON in this folder (issue 31): /usr/bin/python3 summarize.py
import glob, json, os
here = os.path.dirname(os.path.abspath(__file__))
print('| run | s | gen tok/s | TTFT p50 / p99 (s) | ITL p50 / p90 / p99 (ms) | p90/p50 | longest stall p50 / max (ms) | max stall / ITL p50 |')
print('|---|---:|---:|---:|---:|---:|---:|---:|')
for path in sorted(glob.glob(os.path.join(here, '*.json'))):
    if os.path.getsize(path) == 0: continue  # a run still going
    r = json.load(open(path))['results'][0]
    p50, p90, p99 = (r[k] * 1e3 for k in ('itl_p50_s', 'itl_p90_s', 'itl_p99_s'))
    print(f"| {os.path.basename(path)[:-5]} | {r['seconds']:.1f} | {r['tokens_per_s']:.2f} | {r['ttft_p50_s']:.1f} / {r['ttft_p99_s']:.1f} | "
          f"{p50:.0f} / {p90:.0f} / {p99:.0f} | {p90 / p50:.2f} | {r['stall_p50_s'] * 1e3:.0f} / {r['stall_max_s'] * 1e3:.0f} | "
          f"{r['stall_max_s'] * 1e3 / p50:.1f} |" + (f" failed {r['failed']}" if r['failed'] else ''))
