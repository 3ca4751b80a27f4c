"""`adrun profile --hosts ... --plot FILE`: the predicted scaling curves as a PNG.

matplotlib is optional (the `plot` extra, also in `bench`): a plot is a convenience beside the
JSON, which holds the same numbers, and matplotlib would double adrun's install for a flag most
runs never use. `require_matplotlib` is called before the profile starts, so a missing library
costs the user no profiling run.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

from adrun.errors import UserError
from adrun.profile.report import ScalingSection
from adrun.strategies.auto import AUTO


def require_matplotlib() -> None:
    """UserError naming the install command when matplotlib cannot be imported."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UserError("--plot needs matplotlib, which adrun does not install by default: "
                        "pip install 'adrun[plot]' (or pip install matplotlib), or leave out --plot: "
                        "--json holds the same figures")


def write_scaling_plot(section: ScalingSection, path: Path, title: str) -> None:
    """Examples/s against hosts (both axes logarithmic), one line per builder, Auto bold, the
    ideal linear scaling of the compute-bound rate dashed, and the published anchors beside the
    curves. UserError when the file cannot be written."""
    import matplotlib

    matplotlib.use("Agg")  # no display: the plot goes to a file
    import matplotlib.pyplot as plt

    fig, (ax, notes) = plt.subplots(1, 2, figsize=(12, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    ideal: dict[int, float] = {}
    for curve in section.curves:
        points = [p for p in curve.points if p.examples_per_s is not None]
        if not points:
            continue
        auto = curve.builder == AUTO
        ax.plot([p.hosts for p in points], [p.examples_per_s for p in points], marker="o",
                linewidth=3 if auto else 1.2, color="black" if auto else None, label=curve.builder, zorder=3 if auto else 2)
        for p in points:
            if p.efficiency and p.examples_per_s:
                ideal.setdefault(p.hosts, p.examples_per_s / p.efficiency)
    if ideal:
        hosts = sorted(ideal)
        ax.plot(hosts, [ideal[h] for h in hosts], linestyle="--", color="grey", label="linear (compute only)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(section.host_counts, [str(h) for h in section.host_counts])
    ax.set_xlabel("hosts")
    ax.set_ylabel("predicted examples/s (cluster)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    notes.axis("off")
    text = [f"Each host: {_shape(section)}; every path between hosts {section.link_mbit_s:,.0f} Mbit/s, "
            f"{section.link_latency_ms:.2f} ms ({section.link_source}).", "",
            "Published anchors (other hardware: GPUs, 25-100 Gbit/s):",
            *(f"- {a}" for a in section.anchors)]
    wrapped = "\n".join(line for t in text for line in (textwrap.wrap(t, 60, subsequent_indent="  ") or [""]))
    notes.text(0, 1, wrapped, va="top", fontsize=8, family="monospace")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise UserError(f"--plot {path}: cannot write the plot: {e.strerror or e}") from None
    finally:
        plt.close(fig)


def _shape(section: ScalingSection) -> str:
    shapes = sorted(set(zip(section.workers_per_host, section.ps_per_host, strict=True)))
    return " or ".join(f"{w} worker(s) + {p} PS" for w, p in shapes)
