"""The comparison as a rich table, a Markdown table and a PNG bar chart of the ratios."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from typing import Any


def _num(x: float | None, unit: str) -> str:
    if x is None:
        return "–"
    if unit in ("ms", "B/record"):
        return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"
    return f"{x:,.0f}"


def rows(figures: Sequence[dict[str, Any]]) -> list[list[str]]:
    """workload, unit, sparklog median (best), Kafka median (best), ratio, target, met, load."""
    out = []
    for f in figures:
        ratio = f.get("ratio")
        target = f.get("target")
        met = "" if ratio is None or target is None else ("met" if ratio >= target else "missed")
        loads = ", ".join(f"{x:.1f}" for x in f.get("loads", []))
        kafka = (f"{_num(f.get('baseline'), f['unit'])} "
                 f"({_num(f.get('baseline_best'), f['unit'])})")
        out.append([f["label"], f["unit"],
                    f"{_num(f['ours'], f['unit'])} ({_num(f.get('ours_best'), f['unit'])})", kafka,
                    "–" if ratio is None else f"{ratio:.2f}",
                    "–" if target is None else f"{target:.2f}", met, loads])
    return out


HEADER = ["workload", "unit", "sparklog median (best)", "Kafka median (best)",
          "ratio", "target", "", "load avg per run (A, B, A, B, ...)"]


def print_table(title: str, figures: Sequence[dict[str, Any]], note: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, caption=note, caption_justify="left")
    for i, h in enumerate(HEADER):
        table.add_column(h, justify="right" if 2 <= i <= 5 else "left")
    for r in rows(figures):
        table.add_row(*r)
    Console(width=200).print(table)


def markdown(title: str, figures: Sequence[dict[str, Any]], note: str) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(HEADER) + " |",
             "|" + "|".join("---:" if 2 <= i <= 5 else "---" for i in range(len(HEADER))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows(figures)]
    return "\n".join(lines + ["", note, ""])


def bar_chart(path: str, title: str, figures: Sequence[dict[str, Any]]) -> str | None:
    """Bars of each figure's ratio (log scale, 1 = level with Kafka), targets as ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [f for f in figures if f.get("ratio")]
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(shown) + 1.6))
    names = [f["label"] for f in shown][::-1]
    ratios = [f["ratio"] for f in shown][::-1]
    colors = ["#2a9d8f" if r >= 1 else "#e76f51" for r in ratios]
    ax.barh(names, ratios, color=colors)
    for y, f in enumerate(shown[::-1]):
        if f.get("target"):
            ax.plot([f["target"]] * 2, [y - 0.4, y + 0.4], color="black", linewidth=2)
        ax.text(f["ratio"], y, f" {f['ratio']:.2f}", va="center", fontsize=8)
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("sparklog vs Kafka, medians (>1: sparklog better; ms and bytes as "
                  "Kafka/sparklog)\nblack tick: issue 18's target", fontsize=9)
    ax.set_title(textwrap.fill(title, 90), fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
