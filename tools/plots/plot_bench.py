#!/usr/bin/env python3
"""PNG plots from a `flashdllm bench` summary.json (docs/bench.md):

* fig5_accuracy_vs_throughput.png -- the paper's Figure 5 shape: accuracy against tokens/s and
  against tokens per iteration, one curve per method (and per fixed value of the other swept
  options), each point labelled with the value swept along the curve (Flash-Verify: gamma;
  the other methods: the threshold epsilon). Horizontal bars: min-max of tokens/s over the repeats.
* fig4_throughput_memory_vs_batch.png -- the paper's Figure 4 shape: tokens/s and peak memory
  against the batch size, one line per method and setting (timing-only points; else any setting
  measured at several batch sizes).
* table1_speedup.png -- Table 1 as bars: per benchmark, the speed-up of each method's Table 1 row
  (the `table1` points) over the no-cache baseline, accuracy written on each bar.

A figure whose points are absent from the summary is skipped with a note (exit status 0), unless
--require names it.

Usage: plot_bench.py SUMMARY.json [--out DIR] [--released] [--require fig5,fig4,table1]
"""
import argparse
import json
import sys
from collections import OrderedDict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

METHOD_ORDER = ["none", "prefix", "dual", "flash", "flash+verify"]
METHOD_NAMES = {"none": "LLaDA (no cache)", "prefix": "Fast-dLLM prefix", "dual": "Fast-dLLM dual",
                "flash": "Flash-Cache (confidence)", "flash+verify": "Flash-Cache + Flash-Verify"}
COLORS = {"none": "tab:gray", "prefix": "tab:olive", "dual": "tab:blue", "flash": "tab:orange",
          "flash+verify": "tab:red"}
SYMBOLS = {"threshold": "ε", "gamma": "γ", "track_num": "β_t", "mask_num": "β_m", "block_length": "block",
           "gen_length": "G", "steps": "steps", "verify_rule": "rule", "max_candidates": "cand", "verify_kept": "kept",
           "tokens_per_step": "k", "temperature": "T", "seed": "seed"}
# The option swept along a curve, by method (the others split curves).
CURVE_KEY_ORDER = {"flash+verify": ["gamma", "threshold", "track_num", "mask_num"]}
DEFAULT_CURVE_KEY_ORDER = ["threshold", "track_num", "mask_num", "gamma"]


def fmt_value(v):
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def method_rank(m):
    return METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER)


def metric(p, name, stat="median"):
    m = p.get("metrics", {}).get(name)
    return None if m is None else m.get(stat)


def sort_value(v):
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))


def curves(points):
    """Groups points into curves: {(method, fixed (key, value) pairs, batch or None): (curve key, [points])}."""
    by_method = OrderedDict()
    for p in sorted(points, key=lambda p: method_rank(p["method"])):
        by_method.setdefault(p["method"], []).append(p)
    out = OrderedDict()
    batches = {p["batch"] for p in points}
    for method, pts in by_method.items():
        varying = [k for k in pts[0]["swept"] if len({json.dumps(p["swept"].get(k)) for p in pts}) > 1]
        order = CURVE_KEY_ORDER.get(method, DEFAULT_CURVE_KEY_ORDER)
        key = next((k for k in order if k in varying), varying[0] if varying else None)
        for p in pts:
            fixed = tuple((k, p["swept"][k]) for k in varying if k != key)
            ident = (method, fixed, p["batch"] if len(batches) > 1 else None)
            out.setdefault(ident, (key, []))[1].append(p)
    for ident, (key, pts) in out.items():
        if key is not None:
            pts.sort(key=lambda p: sort_value(p["swept"][key]))
    return out


def curve_label(ident):
    method, fixed, batch = ident
    s = METHOD_NAMES.get(method, method)
    extra = [f"{SYMBOLS.get(k, k)}={fmt_value(v)}" for k, v in fixed]
    if batch is not None:
        extra.append(f"batch {batch}")
    return s + (" (" + ", ".join(extra) + ")" if extra else "")


LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def plot_fig5(summary, path, released=False):
    pts = [p for p in summary["points"] if not p["timing_only"] and p.get("accuracy") is not None]
    if not pts:
        return False
    tasks = list(OrderedDict.fromkeys(p["task"] for p in pts))
    tps = "tokens_per_second_released" if released else "tokens_per_second"
    fig, axes = plt.subplots(len(tasks), 2, figsize=(13, 5.2 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        tpts = [p for p in pts if p["task"] == task]
        style_index = {}
        for ident, (key, cpts) in curves(tpts).items():
            method = ident[0]
            i = style_index.setdefault(method, 0)
            style_index[method] += 1
            style = dict(color=COLORS.get(method, None), linestyle=LINESTYLES[i % len(LINESTYLES)],
                         marker=MARKERS[i % len(MARKERS)], markersize=6, linewidth=1.5)
            ys = [100 * p["accuracy"] for p in cpts]
            for col, xname in enumerate([tps, "tokens_per_iteration"]):
                ax = axes[row][col]
                xs = [metric(p, xname) for p in cpts]
                xerr = [[x - metric(p, xname, "min") for x, p in zip(xs, cpts)],
                        [metric(p, xname, "max") - x for x, p in zip(xs, cpts)]]
                ax.errorbar(xs, ys, xerr=xerr, label=curve_label(ident), capsize=2, **style)
                if key is not None:
                    for x, y, p in zip(xs, ys, cpts):
                        ax.annotate(f"{SYMBOLS.get(key, key)}{fmt_value(p['swept'][key])}", (x, y),
                                    textcoords="offset points", xytext=(4, 4), fontsize=7, color=style["color"])
        n = max(p["n"] for p in tpts)
        for col, xlabel in enumerate(["tokens/s" + (" (released definition)" if released else " (median of repeats)"),
                                      "tokens per iteration"]):
            ax = axes[row][col]
            ax.set_xlabel(xlabel)
            ax.set_ylabel("accuracy (%)")
            ax.set_title(f"{task}: accuracy vs {'throughput' if col == 0 else 'tokens per iteration'} (n={n})")
            ax.grid(True, alpha=0.3)
        axes[row][0].legend(fontsize=7, loc="best")
    fig.suptitle(title_of(summary), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def title_of(summary):
    hw = summary.get("hardware", {})
    commit = str(summary.get("commit", "?"))[:12]
    return f"{Path(str(summary.get('model', '?'))).name} · {hw.get('backend', '?')} · commit {commit} · {summary.get('date', '')}"


def setting_key(p):
    return (p["method"], tuple(sorted((k, json.dumps(v)) for k, v in p["swept"].items())), p["task"])


def plot_fig4(summary, path, released=False):
    pts = [p for p in summary["points"] if p["timing_only"]]
    if not pts:  # any setting measured at several batch sizes
        groups = OrderedDict()
        for p in summary["points"]:
            groups.setdefault(setting_key(p), []).append(p)
        pts = [p for g in groups.values() if len({p["batch"] for p in g}) > 1 for p in g]
    if not pts:
        return False
    tps = "tokens_per_second_released" if released else "tokens_per_second"
    lines = OrderedDict()
    for p in sorted(pts, key=lambda p: (method_rank(p["method"]), p["batch"])):
        lines.setdefault(setting_key(p), []).append(p)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    style_index = {}
    for (method, swept, task), lpts in lines.items():
        i = style_index.setdefault(method, 0)
        style_index[method] += 1
        style = dict(color=COLORS.get(method, None), linestyle=LINESTYLES[i % len(LINESTYLES)],
                     marker=MARKERS[i % len(MARKERS)], linewidth=1.5, capsize=3)
        label = METHOD_NAMES.get(method, method)
        extra = [f"{SYMBOLS.get(k, k)}={fmt_value(json.loads(v))}" for k, v in swept]
        if extra:
            label += " (" + ", ".join(extra) + ")"
        bs = [p["batch"] for p in lpts]
        for ax, name, scale in [(axes[0], tps, 1.0), (axes[1], "peak_memory_bytes", 1 / 2**20)]:
            ys = [metric(p, name) for p in lpts]
            if any(y is None for y in ys):
                continue
            lo = [(y - metric(p, name, "min")) * scale for y, p in zip(ys, lpts)]
            hi = [(metric(p, name, "max") - y) * scale for y, p in zip(ys, lpts)]
            ax.errorbar(bs, [y * scale for y in ys], yerr=[lo, hi], label=label, **style)
    kind = next((p.get("peak_memory_kind") for p in pts if p.get("peak_memory_kind")), "")
    for ax, ylabel, title in [(axes[0], "tokens/s" + (" (released definition)" if released else ""), "throughput vs batch"),
                              (axes[1], "peak memory (MiB)", "peak memory vs batch")]:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({p["batch"] for p in pts}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("batch size (requests per call; Flash-Cache: slots)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes[1].annotate(kind, (0.01, 0.01), xycoords="axes fraction", fontsize=7, color="0.3")
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(title_of(summary), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_table1(summary, path, released=False):
    pts = [p for p in summary["points"] if p.get("table1") and not p["timing_only"]]
    pts = [p for p in pts if p.get("speedup_released" if released else "speedup") is not None]
    if not pts:
        return False
    bench = OrderedDict()
    for p in pts:
        bench.setdefault((p["task"], p["options"]["gen_length"], p["batch"]), {})[p["method"]] = p
    methods = sorted({p["method"] for p in pts}, key=method_rank)
    several_batches = len({k[2] for k in bench}) > 1
    fig, ax = plt.subplots(figsize=(max(8.0, 1.6 + 0.6 * len(bench) * len(methods)), 5))
    width = 0.8 / len(methods)
    key = "speedup_released" if released else "speedup"
    for mi, method in enumerate(methods):
        xs, ys, accs = [], [], []
        for bi, (_, row) in enumerate(bench.items()):
            p = row.get(method)
            if p is None:
                continue
            xs.append(bi - 0.4 + width * (mi + 0.5))
            ys.append(p[key])
            accs.append(p.get("accuracy"))
        bars = ax.bar(xs, ys, width=width * 0.95, color=COLORS.get(method, None), label=METHOD_NAMES.get(method, method))
        for b, y, a in zip(bars, ys, accs):
            ax.annotate(f"{y:.2f}x" + (f"\n{100 * a:.1f}%" if a is not None else ""),
                        (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(bench)))
    ax.set_xticklabels([f"{t}\nG={g}" + (f", batch {b}" if several_batches else "") for (t, g, b) in bench])
    ax.axhline(1.0, color="0.5", linewidth=0.8, linestyle="--")
    ax.set_ylabel("speed-up over no cache (tokens/s" + (", released definition)" if released else ")"))
    ax.set_title("Speed-up per benchmark (Table 1 rows; accuracy under each value)", fontsize=10)
    ax.margins(y=0.2)
    ax.legend(fontsize=8)
    fig.suptitle(title_of(summary), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


FIGURES = OrderedDict([("fig5", ("fig5_accuracy_vs_throughput.png", plot_fig5)),
                       ("fig4", ("fig4_throughput_memory_vs_batch.png", plot_fig4)),
                       ("table1", ("table1_speedup.png", plot_table1))])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("summary", type=Path, help="summary.json written by flashdllm bench --out")
    ap.add_argument("--out", type=Path, help="directory for the PNGs (default: the summary's directory)")
    ap.add_argument("--released", action="store_true", help="tokens/s in the released code's definition")
    ap.add_argument("--require", default="", help="comma-separated figures that must be drawn (fig5, fig4, table1)")
    a = ap.parse_args(argv)
    try:
        summary = json.loads(a.summary.read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"plot_bench: cannot read {a.summary}: {e}", file=sys.stderr)
        return 2
    if not isinstance(summary, dict) or not isinstance(summary.get("points"), list):
        print(f"plot_bench: {a.summary} is not a flashdllm bench summary (no \"points\")", file=sys.stderr)
        return 2
    required = [r for r in a.require.split(",") if r]
    unknown = [r for r in required if r not in FIGURES]
    if unknown:
        print(f"plot_bench: unknown figure(s) {unknown}; figures: {list(FIGURES)}", file=sys.stderr)
        return 2
    out = a.out or a.summary.parent
    out.mkdir(parents=True, exist_ok=True)
    missing = []
    for name, (fname, fn) in FIGURES.items():
        if fn(summary, out / fname, a.released):
            print(f"plot_bench: wrote {out / fname}")
        else:
            print(f"plot_bench: {name}: no points for this figure in {a.summary}; skipped")
            missing.append(name)
    failed = [r for r in required if r in missing]
    if failed:
        print(f"plot_bench: required figure(s) not drawn: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
