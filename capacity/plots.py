"""PNG plots of a plan: RAM per tier vs chunks, replicas vs QPS, latency vs load, the retry storm,
review queues and utilisation vs load (people beside machines).

matplotlib with the Agg backend (no display); small figures at a low dpi, because the PNGs are
committed to the repository.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from capacity import reviewers, sizing  # noqa: E402
from capacity.retrystorm import (  # noqa: E402
    attempts_from_retries,
    deadline_propagated_amplification,
    every_layer_amplification,
    hedge_amplification,
    retry_budget_amplification,
)
from capacity.simulate import NonePolicy, Scenario, ServiceTime, simulate_policy, storm_scenario  # noqa: E402
from capacity.workload import Workload  # noqa: E402

FIGSIZE = (6.4, 4.0)
DPI = 80
TB = 1e12
# Requests per simulated point on the latency-vs-load plot: enough for a visible agreement with
# Erlang C, few enough that `plan --plot` stays within seconds.
LATENCY_SIM_REQUESTS = 6_000
LATENCY_SIM_UTILISATIONS = (0.3, 0.5, 0.7, 0.8, 0.88)
PERCENTILE_99 = 0.99
# Past ~90% busy the tail leaves any useful scale; the plot stops there.
MAX_PLOTTED_UTILISATION = 0.9


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_ram_vs_chunks(workload: Workload, path: Path) -> Path:
    """RAM (with headroom) if every chunk sat in one tier, and DiskANN's SSD, vs chunk count."""
    dims, headroom = workload.embedding.dims, workload.retriever.ram_headroom_fraction
    chunks = np.logspace(4, 9.3, 60)
    curves = {
        f"HNSW (M={workload.hnsw.m}, {workload.hnsw.storage_dtype}, x{workload.hnsw.copies})": [
            sizing.with_headroom(sizing.hnsw_ram_bytes(n, dims, workload.hnsw), headroom) for n in chunks
        ],
        f"exact ({workload.exact.storage_dtype}, x{workload.exact.copies})": [
            sizing.with_headroom(sizing.exact_ram_bytes(n, dims, workload.exact), headroom) for n in chunks
        ],
        f"DiskANN RAM (PQ {workload.diskann.pq_bytes} B, x{workload.diskann.copies})": [
            sizing.with_headroom(sizing.diskann_ram_bytes(n, dims, workload.diskann), headroom) for n in chunks
        ],
    }
    fig, ax = plt.subplots(figsize=FIGSIZE)
    for label, values in curves.items():
        ax.loglog(chunks, np.asarray(values) / TB, label=label)
    ssd = [sizing.diskann_ssd_bytes(n, dims, workload.diskann) / TB for n in chunks]
    ax.loglog(chunks, ssd, ":", color="grey", lw=2, label="DiskANN SSD (not RAM)")
    total = sizing.total_chunks(workload)
    ax.axvline(total, color="black", lw=0.8)
    label_offsets = {"hnsw": (-6, -12), "exact": (-6, 4), "diskann": (-6, 4)}
    for tier, ram in sizing.ram_if_single_tier(workload).items():
        ax.plot([total], [ram / TB], "o", color="black", ms=4)
        ax.annotate(f"{tier}: {ram / TB:.2f} TB", (total, ram / TB), fontsize=8,
                    xytext=label_offsets.get(tier, (-6, 4)), textcoords="offset points", ha="right")
    ax.axhline(workload.limits.cluster_ram_bytes / TB, color="red", lw=0.8, ls=":", label="cluster RAM")
    ax.annotate(f"{total / 1e6:,.0f}M chunks", (total, ax.get_ylim()[0]), rotation=90, va="bottom",
                ha="right", fontsize=8)
    ax.set_xlabel("chunks")
    ax.set_ylabel("TB (10^12 bytes)")
    ax.set_title(f"RAM per tier vs corpus size ({dims}-d)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_replicas_vs_qps(workload: Workload, path: Path) -> Path:
    """Retriever replicas one shard needs vs its searches/s, at the target utilisation."""
    tiers = sizing.workload_tiers(workload)
    report = sizing.replica_report(workload, tiers)
    today = report["per_shard_searches_per_s"]
    top = max(today * 12, 50.0)
    qps = np.linspace(1, top, 200)
    replicas = sizing.replicas_per_shard_curve(workload, list(qps))
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.step(qps, replicas, where="post", label=f"replicas at {workload.retriever.target_utilisation:.0%} busy")
    ax.axvline(today, color="black", lw=0.8)
    ax.annotate(f"busiest shard at peak: {today:.0f}/s", (today, max(replicas) * 0.9), fontsize=8,
                xytext=(4, 0), textcoords="offset points")
    ax.axhline(workload.hnsw.copies, color="grey", lw=0.8, ls=":", label=f"copies kept ({workload.hnsw.copies})")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("searches/s on one shard")
    ax.set_ylabel("replicas per shard")
    ax.set_title(
        f"Replicas vs load ({report['search_service_ms']:.0f} ms/search, "
        f"{workload.retriever.concurrency_per_replica} slots/replica)"
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def erlang_c_wait_quantile_s(arrival_per_s: float, service_s: float, servers: int, share: float) -> float:
    """Quantile of an M/M/c waiting time: P(W > t) = C * exp(-(c*mu - lambda) * t)."""
    offered = arrival_per_s * service_s
    if offered >= servers:
        return math.inf
    waiting_probability = sizing.erlang_c(servers, offered)
    tail = 1.0 - share
    if waiting_probability <= tail:
        return 0.0
    return math.log(waiting_probability / tail) / (servers / service_s - arrival_per_s)


def plot_latency_vs_load(workload: Workload, path: Path, seed: int = 5) -> Path:
    """One replica's latency (service + queueing) vs utilisation: Erlang C lines, simulated dots."""
    service_s = sizing.search_service_s(workload)
    slots = workload.retriever.concurrency_per_replica
    utilisations = np.linspace(0.05, MAX_PLOTTED_UTILISATION, 60)
    rates = utilisations * slots / service_s
    mean_ms = [(sizing.mmc_mean_wait_s(r, service_s, slots) + service_s) * 1e3 for r in rates]
    p99_wait_ms = [erlang_c_wait_quantile_s(r, service_s, slots, PERCENTILE_99) * 1e3 for r in rates]
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.plot(utilisations, mean_ms, label="mean latency (Erlang C)")
    ax.plot(utilisations, np.asarray(p99_wait_ms) + service_s * 1e3, label="p99 wait + mean service")
    simulated = [_simulated_mean_latency_ms(u, service_s, slots, seed) for u in LATENCY_SIM_UTILISATIONS]
    ax.plot(LATENCY_SIM_UTILISATIONS, simulated, "o", color="black", label="simulated mean")
    ax.axvline(workload.retriever.target_utilisation, color="grey", lw=0.8, ls=":", label="target utilisation")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("replica utilisation")
    ax.set_ylabel("ms")
    ax.set_title(f"Latency vs load: M/M/{slots}, {service_s * 1e3:.0f} ms mean service")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _simulated_mean_latency_ms(utilisation: float, service_s: float, slots: int, seed: int) -> float:
    rate = utilisation * slots / service_s
    scenario = Scenario(
        seed=seed,
        duration_s=LATENCY_SIM_REQUESTS / rate,
        rate_qps=rate,
        arrivals="poisson",
        replicas=1,
        concurrency=slots,
        service_time=ServiceTime(distribution="exponential", mean_ms=service_s * 1e3),
        fault=None,
        settle_s=0,
    )
    return simulate_policy(scenario, NonePolicy())["mean_ms"]


def plot_retry_storm(workload: Workload, path: Path) -> Path:
    """Left: simulated per-second load when a replica dies. Right: closed forms vs failure share."""
    res = workload.resilience
    base = sizing.peak_searches_per_s(workload)
    fig, (left, right) = plt.subplots(1, 2, figsize=(FIGSIZE[0] * 1.6, FIGSIZE[1]))
    if res.replicas_down == 1:
        scenario = storm_scenario(base, res.replicas, res.replicas_down, res.retries_per_layer,
                                  res.retry_budget, res.budget_max_attempts, res.hedge_quantile, res.hedge_budget)
        for policy in scenario.policies:
            run = simulate_policy(scenario, policy)
            left.plot(run["per_second"]["offered_qps"], label=f"{policy.name} (peak {run['peak_load_qps']:.0f})")
        left.axvline(scenario.fault.at_s, color="black", lw=0.8, ls=":")
        left.annotate("replica dies", (scenario.fault.at_s, base), fontsize=8, xytext=(3, 3),
                      textcoords="offset points")
    left.set_xlabel("second")
    left.set_ylabel("searches/s offered to replicas")
    left.set_title(f"1 of {res.replicas} replicas dead, {base:.0f}/s offered")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)

    shares = np.linspace(0, 0.6, 61)
    attempts = attempts_from_retries(res.retries_per_layer)
    lines = {
        f"every layer, {'x'.join(map(str, attempts))} attempts": [
            every_layer_amplification(attempts, p) for p in shares
        ],
        "every layer, deadlines propagated": [deadline_propagated_amplification(attempts, p) for p in shares],
        f"one layer, {res.retry_budget:.0%} budget": [
            retry_budget_amplification(p, res.budget_max_attempts, res.retry_budget) for p in shares
        ],
        f"hedge at p{res.hedge_quantile * 100:.0f}, {res.hedge_budget:.0%} budget": [
            hedge_amplification(p, res.hedge_quantile, res.hedge_budget) for p in shares
        ],
    }
    for label, values in lines.items():
        right.plot(shares, values, label=label)
    right.axvline(res.replicas_down / res.replicas, color="black", lw=0.8, ls=":")
    right.annotate(f"{res.replicas_down} of {res.replicas} dead", (res.replicas_down / res.replicas, 4.0),
                   fontsize=8, xytext=(3, 3), textcoords="offset points")
    right.set_xlabel("share of attempts hitting a dead replica")
    right.set_ylabel("load / offered load")
    right.set_title("Retry amplification (closed forms)")
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8)
    return _save(fig, path)


def _load_axis_top(team_saturations: list[float], machine_saturations: list[float]) -> float:
    """The plots' right edge: past every team's saturation point and the first machine's, at least 2x
    (a machine further out is in the legend, with its multiplier)."""
    finite = [m for m in team_saturations if m < sizing.MAX_LOAD_MULTIPLIER]
    return max([2.0, *finite, min(machine_saturations, default=0.0)]) * 1.25


def plot_people_vs_load(workload: Workload, path: Path) -> Path:
    """Left: each team's mean queue wait vs the load multiplier. Right: teams' and machines'
    utilisation (machines grown to the cluster's limits) vs the same; x marks where each reaches 1."""
    people = reviewers.people_report(workload)
    machines = people["machines"]
    saturations = [t["saturation_multiplier"] for t in people["teams"].values()]
    top = _load_axis_top(saturations, [m["at_limits"] for m in machines.values()])
    loads = np.linspace(0.02, top, 400)
    fig, (left, right) = plt.subplots(1, 2, figsize=(FIGSIZE[0] * 1.6, FIGSIZE[1]))
    waits_seen = [0.0]
    for team, colour in zip(workload.people.teams, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 8):
        waits = [reviewers.team_mean_wait_minutes(workload, team, m) for m in loads]
        waits_seen += [w for w in waits if math.isfinite(w)]
        saturation = people["teams"][team.name]["saturation_multiplier"]
        left.plot(loads, waits, color=colour, label=f"{team.name} ({team.reviewers} reviewers)")
        right.plot(loads, [reviewers.team_utilisation(workload, team, m) for m in loads], color=colour,
                   label=f"{team.name}: {_multiplier_label(saturation)}")
        if saturation < top:
            left.axvline(saturation, color=colour, lw=0.8, ls=":")
            right.plot([saturation], [1.0], "x", color=colour, ms=8, mew=2)
    for (name, machine), style in zip(machines.items(), ("--", "-.", ":") * 4):
        saturation = machine["at_limits"]
        right.plot(loads, loads / saturation if saturation > 0 else np.full_like(loads, np.inf), style,
                   color="black", lw=1, label=f"{name} ({machine['kind']}): {_multiplier_label(saturation)}")
        if saturation < top:
            right.plot([saturation], [1.0], "o", color="black", ms=5)
    left.set_ylim(0, min(max(waits_seen) * 1.1, 60.0) or 1.0)
    left.set_xlabel("load multiplier (x today's traffic)")
    left.set_ylabel("mean queue wait (minutes, working hours)")
    left.set_title("Review queues: M/M/c wait per team")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=7)
    right.axhline(1.0, color="red", lw=0.8, ls=":")
    right.set_xlim(0, top)
    right.set_ylim(0, 1.6)
    right.set_xlabel("load multiplier (x today's traffic)")
    right.set_ylabel("utilisation (1: the queue grows without bound)")
    first = people["first_to_fall"]
    right.set_title(f"First to fall behind: {first['name']} at {first['at_load_multiplier']:.2f}x" if first
                    else "Utilisation vs load")
    right.grid(True, alpha=0.3)
    right.legend(fontsize=6, loc="lower right", title="queue unbounded at (machines at limits)",
                 title_fontsize=6)
    return _save(fig, path)


def _multiplier_label(multiplier: float) -> str:
    return f"{multiplier:.2f}x" if multiplier < sizing.MAX_LOAD_MULTIPLIER else "never (>1000x)"


def write_plots(workload: Workload, directory: str | Path) -> list[Path]:
    """Write every plot of the plan into `directory`; returns the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    return [
        plot_ram_vs_chunks(workload, out / "capacity-ram-vs-chunks.png"),
        plot_replicas_vs_qps(workload, out / "capacity-replicas-vs-qps.png"),
        plot_latency_vs_load(workload, out / "capacity-latency-vs-load.png"),
        plot_retry_storm(workload, out / "capacity-retry-storm.png"),
        plot_people_vs_load(workload, out / "capacity-people-vs-load.png"),
    ]
