"""A drill's timeline as a PNG: p50/p95/p99 latency of the 2xx per second above, the error share per
second below, the fault window shaded on both."""

from __future__ import annotations

from pathlib import Path


def write_timeline(rows: list[dict], fault_start_s: float, fault_end_s: float, title: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no screen here, and never a GUI backend in a drill
    import matplotlib.pyplot as plt

    seconds = [row["t_s"] + 0.5 for row in rows]
    figure, (latency, errors) = plt.subplots(2, 1, figsize=(10, 6), sharex=True,
                                             gridspec_kw={"height_ratios": [3, 1.4]})
    for name, style in (("p50_ms", "-"), ("p95_ms", "--"), ("p99_ms", ":")):
        latency.plot(seconds, [row[name] if row[name] is not None else float("nan") for row in rows],
                     style, label=name.replace("_ms", ""))
    latency.set_ylabel("latency of 2xx (ms)")
    latency.set_yscale("log")
    latency.legend(loc="upper left")
    errors.bar(seconds, [100 * row["error_share"] for row in rows], width=0.9, color="tab:red")
    errors.set_ylabel("5xx (%)")
    errors.set_xlabel("seconds since the drill started")
    for axis in (latency, errors):
        axis.axvspan(fault_start_s, fault_end_s, color="tab:orange", alpha=0.2, label="fault")
        axis.grid(alpha=0.3)
    latency.set_title(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
