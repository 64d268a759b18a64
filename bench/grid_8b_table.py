#!/usr/bin/env python3
"""The results table of bench/gpu_grid_8b.sh: one row per (prompt length, slots), none / dual / flash.

Reads OUT/p{P}_s{S}_{method}.json (`flashdllm generate --json`) and OUT/*.err, prints markdown.

Per point:
  ms/iteration = the call's wall seconds / its iterations (max NFE over the requests; the flash run's
                 first iteration is the full prefill of every slot, included);
  tokens/s     = committed tokens of all requests / wall seconds (dual, flash: measured);
  none         = full recompute: an iteration costs the same whatever it commits, so its tokens/s is
                 derived, slots x k / (s per iteration), at k = --per-iter (the others' schedule) and k = 1
                 (the LLaDA baseline's own schedule, steps = gen_length);
  speed-up per generated token = flash tokens/s / none tokens/s at each of those schedules;
  peak GiB     = Engine::peak_memory_bytes (weights + K/V + workspaces) / 2^30.
"""
import argparse
import json
import pathlib
import re


def load(out, p, s, m):
    path = out / f"p{p}_s{s}_{m}.json"
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        err = out / f"p{p}_s{s}_{m}.err"
        msg = err.read_text().strip().splitlines()[-1] if err.exists() and err.read_text().strip() else "not run"
        if err.exists() and "timed out" in err.read_text():
            msg = "timed out: " + msg
        return {"error": msg}
    res = d.get("results") or []
    if not res or d.get("options", {}).get("cache") != {"none": "none", "dual": "dual", "flash": "flash"}.get(m):
        return {"error": f"{path.name}: no results, or not a --cache {m} run"}
    sec = max(r["seconds"] for r in res)
    iters = max(r["nfe"] for r in res)
    if sec <= 0 or iters <= 0:
        return {"error": f"{path.name}: {sec} s over {iters} iterations"}
    toks = sum(r["committed_tokens"] for r in res)
    return {
        "seconds": sec,
        "iterations": iters,
        "tokens": toks,
        "ms_per_iteration": 1e3 * sec / iters,
        "tokens_per_second": toks / sec,
        "peak_gib": d["peak_memory_bytes"] / 2**30,
        "requests": len(res),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--per-iter", type=int, default=8, help="tokens per iteration of dual and flash")
    ap.add_argument("--json", type=pathlib.Path, help="also write the points here")
    a = ap.parse_args()

    pts = {}
    for f in a.out.glob("p*_s*_*.json"):
        m = re.fullmatch(r"p(\d+)_s(\d+)_(\w+)\.json", f.name)
        if m:
            pts.setdefault((int(m[1]), int(m[2])), set()).add(m[3])
    for f in a.out.glob("p*_s*_*.err"):
        m = re.fullmatch(r"p(\d+)_s(\d+)_(\w+)\.err", f.name)
        if m:
            pts.setdefault((int(m[1]), int(m[2])), set()).add(m[3])

    k = a.per_iter
    print(f"| prompt | slots | none ms/it | dual ms/it | flash ms/it | none tok/s at {k}/it (derived) | "
          f"none tok/s at 1/it (derived) | dual tok/s | flash tok/s | flash vs none per token, {k}/it both | "
          f"flash vs none per token, LLaDA 1/it | flash vs dual | peak GiB none / dual / flash |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    notes, rows = [], []
    for (p, s) in sorted(pts):
        r = {m: load(a.out, p, s, m) for m in ("none", "dual", "flash")}
        row = {"prompt": p, "slots": s, **r}

        def ms(m):
            if "error" in r[m]:
                if m in pts[(p, s)]:  # methods this run did not ask for are not listed
                    notes.append(f"p{p} s{s} {m}: {r[m]['error']}")
                return "—"
            return f"{r[m]['ms_per_iteration']:.1f}"

        cells = [str(p), str(s), ms("none"), ms("dual"), ms("flash")]
        n_ok, d_ok, f_ok = ("error" not in r[m] for m in ("none", "dual", "flash"))
        none_k = s * k / (r["none"]["ms_per_iteration"] / 1e3) if n_ok else None
        none_1 = s / (r["none"]["ms_per_iteration"] / 1e3) if n_ok else None
        row["none_tokens_per_second_derived"] = {str(k): none_k, "1": none_1}
        cells += [f"{none_k:.0f}" if n_ok else "—", f"{none_1:.1f}" if n_ok else "—"]
        cells += [f"{r['dual']['tokens_per_second']:.0f}" if d_ok else "—",
                  f"{r['flash']['tokens_per_second']:.0f}" if f_ok else "—"]
        cells += [f"{r['flash']['tokens_per_second'] / none_k:.1f}x" if f_ok and n_ok else "—",
                  f"{r['flash']['tokens_per_second'] / none_1:.1f}x" if f_ok and n_ok else "—",
                  f"{r['flash']['tokens_per_second'] / r['dual']['tokens_per_second']:.1f}x" if f_ok and d_ok else "—"]
        cells.append(" / ".join(f"{r[m]['peak_gib']:.2f}" if "error" not in r[m] else "—"
                                for m in ("none", "dual", "flash")))
        print("| " + " | ".join(cells) + " |")
        rows.append(row)
    if notes:
        print("\nNot measured:\n")
        for n in notes:
            print(f"- {n}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
