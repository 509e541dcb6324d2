"""What limits a session: a bottleneck class with a Bayesian confidence, and what to do about it.

A session is summarized as evidence signals; each falls into a bin of its rule, and each bin says
how likely that observation is under every class. The posterior is the prior times those
likelihoods (naive Bayes), so a confidence is a probability rather than a hand-tuned score, and a
signal that was not measured (None, e.g. no GPU power telemetry on a CPU host) simply drops out;
so do the roofline signals of a session with no hardware envelope (a trace whose GPU has neither
a measured envelope nor a datasheet): it is classified on its kernel-side signals alone.

Every number lives in PRIORS and SIGNAL_RULES, one table that rules_markdown() prints for the reference (docs/reference_pages.py)
and that is meant to be recalibrated against measured sessions. Naive Bayes treats signals as
independent; correlated ones (launch_tax, microkernel_share, mean_kernel_us) therefore push the
confidence further than their joint information warrants, which calibration should absorb.

A signal read over profiled iterations is their median (analysis/evidence), so one preempted
iteration cannot flip the class; its mean rides along in the evidence (EvidenceItem.mean) to be
shown beside it, and judges nothing.

Hard bins make a close call look settled: bert_encoder's mean kernel sat at 19-21 µs across
five quiet runs, either side of the 20 µs edge, and its class went balanced 0.80 four times and
launch-bound once. So every class is also judged with each signal moved by CLOSE_CALL (its
run-to-run spread on a quiet host), and a class that wins there is named beside the winner as
a close call (close_calls), with the fewest signals that make it win.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import product

import numpy as np

LAUNCH = "launch-bound"
CPU = "cpu-bound"
MEMORY = "memory-bound"
COMPUTE = "compute-bound"
THROTTLED = "throttled"
BALANCED = "balanced"
CLASSES: tuple[str, ...] = (LAUNCH, CPU, MEMORY, COMPUTE, THROTTLED, BALANCED)

# Roughly uniform: we have no measured base rates yet. Balanced is slightly favoured so that
# evidence has to point somewhere before a session is called a bottleneck.
PRIORS: dict[str, float] = {
    LAUNCH: 0.16,
    CPU: 0.16,
    MEMORY: 0.16,
    COMPUTE: 0.16,
    THROTTLED: 0.16,
    BALANCED: 0.20,
}

RUNNER_UP_MIN_POSTERIOR = 0.2  # below this the runner-up gets no recommendations
# A class is decided when its posterior reaches this: an even chance against all others together.
DECIDED_MIN = 0.5
# A class that only these signals can tell from the others is out of reach when none of them
# was judged: with no clock or power reading, "throttled" would win on its prior alone (an
# ingested RPD trace once led with it, advised to check cooling).
REQUIRES: dict[str, tuple[str, ...]] = {
    THROTTLED: ("clock_drop", "clock_cv", "power_or_thermal_limited"),
    CPU: ("runqueue_wait_ratio", "involuntary_switches_per_s"),
}
SET_ASIDE = "set aside"  # the bin of a signal shown but not judged (analysis.bottleneck.contention)

# How far a signal may move between two quiet runs of one model: over five quiet zoo runs on
# the 2-core CI host, the kernel-side signals of one model moved 10-20 % (mean kernel time
# mlp 30-37 µs, memory_bound 1.5-1.7 ms, bert_encoder 19-21 µs); a class that wins with the
# signals moved that far is a close call.
CLOSE_CALL = 0.2
CLOSE_CALL_MAX_MOVED = 6  # the signals nearest an edge judged together (3^6 combinations)


@dataclass(frozen=True)
class SignalRule:
    edges: tuple[float, ...]  # n ascending edges make n + 1 bins; a value on an edge bins low
    likelihoods: Mapping[str, tuple[float, ...]]  # class -> P(bin | class), one per bin
    rationale: str


# Bins are "≤ e0", "e0 – e1", "> e1" (one more bin per extra edge). Columns: low to high bin.
SIGNAL_RULES: dict[str, SignalRule] = {
    "launch_tax": SignalRule(
        edges=(0.1, 0.3),
        likelihoods={
            LAUNCH: (0.05, 0.20, 0.75),
            CPU: (0.10, 0.30, 0.60),
            MEMORY: (0.60, 0.30, 0.10),
            COMPUTE: (0.65, 0.27, 0.08),
            THROTTLED: (0.40, 0.40, 0.20),
            BALANCED: (0.35, 0.50, 0.15),
        },
        rationale="host time between kernels: launch overhead, or a starved host (cpu-bound)",
    ),
    "microkernel_share": SignalRule(
        edges=(0.2, 0.5),
        likelihoods={
            LAUNCH: (0.05, 0.20, 0.75),
            CPU: (0.50, 0.30, 0.20),
            MEMORY: (0.50, 0.30, 0.20),
            COMPUTE: (0.65, 0.25, 0.10),
            THROTTLED: (0.35, 0.35, 0.30),
            BALANCED: (0.35, 0.45, 0.20),
        },
        rationale="kernels under 10 µs cost about as much to launch as to run",
    ),
    "mean_kernel_us": SignalRule(
        edges=(20.0, 500.0),
        likelihoods={
            LAUNCH: (0.75, 0.20, 0.05),
            CPU: (0.15, 0.60, 0.25),
            MEMORY: (0.10, 0.35, 0.55),
            COMPUTE: (0.05, 0.35, 0.60),
            THROTTLED: (0.30, 0.40, 0.30),
            BALANCED: (0.20, 0.50, 0.30),
        },
        rationale="tiny kernels point to launch cost; long ones to memory or math",
    ),
    "compute_utilization": SignalRule(
        edges=(0.1, 0.4),
        likelihoods={
            LAUNCH: (0.75, 0.20, 0.05),
            CPU: (0.60, 0.30, 0.10),
            MEMORY: (0.55, 0.35, 0.10),
            COMPUTE: (0.05, 0.25, 0.70),
            THROTTLED: (0.35, 0.40, 0.25),
            BALANCED: (0.30, 0.55, 0.15),
        },
        rationale="achieved FLOP/s near the measured GEMM peak means the math units are the limit",
    ),
    "memory_utilization": SignalRule(
        edges=(0.15, 0.5),
        likelihoods={
            LAUNCH: (0.75, 0.20, 0.05),
            CPU: (0.60, 0.30, 0.10),
            MEMORY: (0.05, 0.25, 0.70),
            COMPUTE: (0.30, 0.45, 0.25),
            THROTTLED: (0.35, 0.40, 0.25),
            BALANCED: (0.30, 0.55, 0.15),
        },
        rationale="achieved bytes/s near the measured streaming peak means memory is the limit",
    ),
    "arithmetic_intensity_ratio": SignalRule(
        edges=(0.5, 2.0),
        likelihoods={
            LAUNCH: (0.40, 0.30, 0.30),
            CPU: (0.35, 0.30, 0.35),
            MEMORY: (0.75, 0.20, 0.05),
            COMPUTE: (0.05, 0.20, 0.75),
            THROTTLED: (0.35, 0.30, 0.35),
            BALANCED: (0.25, 0.50, 0.25),
        },
        rationale="FLOP/byte over the roofline ridge: below 1 the memory side, above 1 the math side",
    ),
    "roof_time_per_node_us": SignalRule(
        # The time a node takes at its roofs (its FLOPs at the GEMM peak or its bytes at its
        # memory level's bandwidth, whichever is longer), averaged over the session's nodes: a
        # property of the graph and the device's quiet-host envelope that no competing process
        # moves. Under ~2 us a node costs less to run than to dispatch (ONNX Runtime's CPU
        # dispatch is 1-3 us, a GPU launch 5-10 us); above 20 us the work dominates.
        edges=(2.0, 20.0),
        likelihoods={
            LAUNCH: (0.75, 0.20, 0.05),
            CPU: (0.35, 0.35, 0.30),
            MEMORY: (0.10, 0.30, 0.60),
            COMPUTE: (0.05, 0.25, 0.70),
            THROTTLED: (0.33, 0.33, 0.34),
            BALANCED: (0.25, 0.45, 0.30),
        },
        rationale="the time a node needs at its roofs: too little work per node to pay its launch",
    ),
    "runqueue_wait_ratio": SignalRule(
        # Calibrated on this project's 2-core CI host: a quiet run of the zoo waits 0.002-0.05 s
        # per s; one competing busy process raises it to 0.8-0.95, two to ~1.0. Above 0.6 the
        # measuring process waits for a core more than half as long as it runs: whatever its
        # kernels are, the measurement is the host's. That bin outweighs two strong kernel-side
        # signals: a kernel preempted or not is the scheduler's luck, so under two busy loops the
        # zoo's mlp read compute utilization 0.06-0.64 and launch tax under 0.1 from run to run (a
        # top bin of 0.02 for the other classes let compute-bound win 2 runs in 5).
        edges=(0.1, 0.3, 0.6),
        likelihoods={
            LAUNCH: (0.60, 0.30, 0.095, 0.005),
            CPU: (0.05, 0.15, 0.30, 0.50),
            MEMORY: (0.60, 0.30, 0.095, 0.005),
            COMPUTE: (0.60, 0.30, 0.095, 0.005),
            THROTTLED: (0.50, 0.30, 0.12, 0.08),
            BALANCED: (0.45, 0.45, 0.095, 0.005),
        },
        rationale="threads runnable but waiting for a core: the host is oversubscribed",
    ),
    "involuntary_switches_per_s": SignalRule(
        # ONNX Runtime's spinning thread pool alone gives ~100/s on a quiet 2-core host; two
        # competing busy processes raise it to 200-300/s.
        edges=(150.0, 1000.0),
        likelihoods={
            LAUNCH: (0.60, 0.30, 0.10),
            CPU: (0.15, 0.50, 0.35),
            MEMORY: (0.60, 0.30, 0.10),
            COMPUTE: (0.60, 0.30, 0.10),
            THROTTLED: (0.50, 0.30, 0.20),
            BALANCED: (0.55, 0.35, 0.10),
        },
        rationale="the scheduler keeps preempting the measuring process: something competes for its cores",
    ),
    "clock_drop": SignalRule(
        edges=(0.03, 0.1),
        likelihoods={
            LAUNCH: (0.70, 0.22, 0.08),
            CPU: (0.70, 0.22, 0.08),
            MEMORY: (0.70, 0.22, 0.08),
            COMPUTE: (0.70, 0.22, 0.08),
            THROTTLED: (0.05, 0.20, 0.75),
            BALANCED: (0.65, 0.27, 0.08),
        },
        rationale="the clock fell during the pass: power or thermal limits cut in",
    ),
    "clock_cv": SignalRule(
        edges=(0.01, 0.05),
        likelihoods={
            LAUNCH: (0.70, 0.22, 0.08),
            CPU: (0.70, 0.22, 0.08),
            MEMORY: (0.70, 0.22, 0.08),
            COMPUTE: (0.70, 0.22, 0.08),
            THROTTLED: (0.05, 0.20, 0.75),
            BALANCED: (0.65, 0.27, 0.08),
        },
        rationale="an unsteady clock means the device is managing power, not running flat out",
    ),
    "power_or_thermal_limited": SignalRule(
        edges=(0.01, 0.05),
        likelihoods={
            LAUNCH: (0.80, 0.15, 0.05),
            CPU: (0.80, 0.15, 0.05),
            MEMORY: (0.80, 0.15, 0.05),
            COMPUTE: (0.80, 0.15, 0.05),
            THROTTLED: (0.05, 0.25, 0.70),
            BALANCED: (0.80, 0.15, 0.05),
        },
        rationale="the GPU itself reports power or thermal violations",
    ),
}


@dataclass(frozen=True)
class EvidenceItem:
    signal: str
    value: float | None
    bin: str  # e.g. "> 0.3", "0.1 – 0.3", or "absent"
    threshold_edges: tuple[float, ...]
    likelihoods: dict[str, float]  # P(bin | class); empty when absent
    # the one class this bin is most likely under; "neutral (against ...)" when several share
    # the top likelihood (it argues only against the least likely); None when absent
    favours: str | None
    mean: float | None = None  # beside a per-iteration median value: the mean; judges nothing


@dataclass(frozen=True)
class Recommendation:
    rank: int
    action: str
    why: str  # quotes the evidence values behind the action


@dataclass(frozen=True)
class MovedSignal:
    signal: str
    value: float
    edge: float  # the bin edge it sits near


@dataclass(frozen=True)
class CloseCall:
    """A class that would win were the signals moved within CLOSE_CALL of their values."""

    bottleneck: str
    signals: tuple[MovedSignal, ...]  # the fewest that, moved across their edges, make it win


def close_call_text(calls: Sequence[Mapping] | None) -> str | None:
    """ "launch-bound (mean_kernel_us 19.2 near its edge 20)", for each close call stored (the
    JSON form of CloseCall); None when there is none or it was not judged."""
    if not calls:
        return None
    return "; ".join(
        call["bottleneck"]
        + " ("
        + ", ".join(
            f"{m['signal']} {m['value']:.3g} near its edge {m['edge']:g}" for m in call["signals"]
        )
        + ")"
        for call in calls
    )


def class_line(report: Mapping) -> str:
    """ "memory-bound (0.89)", or "undecided (memory-bound leads at 0.45)" when the evidence did
    not settle it: the class as every surface shows it, from a stored report's row or dict."""
    if report.get("decided") is False:
        return f"undecided ({report['bottleneck']} leads at {report['confidence']:.2f})"
    return f"{report['bottleneck']} ({report['confidence']:.2f})"


def set_aside_signals(evidence: Sequence[Mapping]) -> list[str]:
    """The signals of a stored report's evidence that were shown but not judged."""
    return [e["signal"] for e in evidence if str(e.get("bin") or "").startswith(SET_ASIDE)]


@dataclass(frozen=True)
class BottleneckReport:
    bottleneck: str
    confidence: float  # the winning class's posterior
    posterior: dict[str, float]
    evidence: list[EvidenceItem]
    recommendations: list[Recommendation]
    close_calls: tuple[CloseCall, ...] = ()  # other classes within the signals' run-to-run spread
    # False when the evidence cannot settle the class (the leader under DECIDED_MIN): then
    # `bottleneck` is only the leader, and undecided_reason says why, in numbers
    decided: bool = True
    undecided_reason: str | None = None
    judged_classes: tuple[str, ...] = CLASSES  # the classes the evidence judged could reach

    def to_dict(self) -> dict:
        """Plain, JSON-ready form for storing alongside the session."""
        return asdict(self)


def bin_labels(edges: Sequence[float]) -> list[str]:
    """Human labels for the bins the edges make: "≤ a", "a – b", ..., "> z"."""
    inner = [f"{low:g} – {high:g}" for low, high in zip(edges, edges[1:], strict=False)]
    return [f"≤ {edges[0]:g}", *inner, f"> {edges[-1]:g}"]


def bin_index(value: float, edges: Sequence[float]) -> int:
    """Which bin a value falls in; a value exactly on an edge belongs to the lower bin."""
    return bisect_left(edges, value)


def judge(
    signal: str, value: float | None, mean: float | None = None, set_aside: str | None = None
) -> EvidenceItem:
    """One signal's bin and what that bin says about each class; `mean` is carried beside a
    median value, for the reader. A signal `set_aside` (why) is shown and judges nothing."""
    rule = SIGNAL_RULES[signal]
    if value is None or math.isnan(value):
        return EvidenceItem(signal, None, "absent", rule.edges, {}, None)
    if set_aside:
        shown = float(mean) if mean is not None and not math.isnan(mean) else None
        bin_ = f"{SET_ASIDE}: {set_aside}"
        return EvidenceItem(signal, float(value), bin_, rule.edges, {}, None, shown)
    index = bin_index(value, rule.edges)
    likelihoods = {name: rule.likelihoods[name][index] for name in CLASSES}
    top, bottom = max(likelihoods.values()), min(likelihoods.values())
    leaders = [name for name in CLASSES if likelihoods[name] == top]
    favours = leaders[0]
    if len(leaders) > 1:  # e.g. no clock drop: as likely launch-, memory- or compute-bound
        against = ", ".join(name for name in CLASSES if likelihoods[name] == bottom)
        favours = f"neutral (against {against})"
    label = bin_labels(rule.edges)[index]
    shown_mean = float(mean) if mean is not None and not math.isnan(mean) else None
    return EvidenceItem(signal, float(value), label, rule.edges, likelihoods, favours, shown_mean)


def log_prior(classes: Sequence[str] = CLASSES) -> np.ndarray:
    """The priors' logs, with the classes the evidence cannot reach at minus infinity."""
    return np.array([math.log(PRIORS[name]) if name in classes else -np.inf for name in CLASSES])


def posterior(
    evidence: Sequence[EvidenceItem], classes: Sequence[str] = CLASSES
) -> dict[str, float]:
    """Prior times the likelihood of every present signal, normalized in log space, over
    `classes` (every other class gets 0)."""
    log_post = log_prior(classes)
    for item in evidence:
        if item.likelihoods:
            log_post += np.log([item.likelihoods[name] for name in CLASSES])
    log_post -= log_post.max()
    probs = np.exp(log_post)
    probs /= probs.sum()
    return {name: float(p) for name, p in zip(CLASSES, probs, strict=True)}


def classify_bottleneck(
    evidence: Mapping[str, float | None],
    means: Mapping[str, float | None] | None = None,
    *,
    set_aside: Mapping[str, str] | None = None,
    classes: Sequence[str] = CLASSES,
    context: str | None = None,
) -> BottleneckReport:
    """Classify a session from its signals; missing or None signals contribute nothing.
    `means`: the mean beside a signal whose value is a per-iteration median (shown only).
    `set_aside`: signals the measurement moved (signal -> why), shown but not judged;
    `classes`: the classes the judged evidence can reach; `context`: why, for the reader."""
    unknown = (set(evidence) | set(means or {}) | set(set_aside or {})) - set(SIGNAL_RULES)
    if unknown:
        raise ValueError(f"unknown evidence signals {sorted(unknown)}; known: {list(SIGNAL_RULES)}")
    means, set_aside = means or {}, set_aside or {}
    items = [
        judge(signal, evidence.get(signal), means.get(signal), set_aside.get(signal))
        for signal in SIGNAL_RULES
    ]
    judged = {item.signal for item in items if item.likelihoods}
    classes = [c for c in classes if c not in REQUIRES or not judged.isdisjoint(REQUIRES[c])]
    post = posterior(items, classes)
    ranked = sorted(CLASSES, key=post.__getitem__, reverse=True)  # stable: ties keep table order
    decided = post[ranked[0]] >= DECIDED_MIN
    return BottleneckReport(
        bottleneck=ranked[0],
        confidence=post[ranked[0]],
        posterior=post,
        evidence=items,
        recommendations=[],
        close_calls=close_calls(items, ranked[0], classes),
        decided=decided,
        undecided_reason=None if decided else undecided_reason(items, ranked, post, context),
        judged_classes=tuple(name for name in CLASSES if name in classes),
    )


def undecided_reason(
    items: Sequence[EvidenceItem],
    ranked: Sequence[str],
    post: Mapping[str, float],
    context: str | None,
) -> str:
    """Why the evidence does not settle the class, in numbers: what it rests on, the leader
    and its runner-up."""
    judged = [item.signal for item in items if item.likelihoods]
    leader, runner = ranked[0], ranked[1]
    standing = (
        f"{leader} leads at {post[leader]:.2f} (then {runner} {post[runner]:.2f}), under the "
        f"{DECIDED_MIN:g} a class needs"
    )
    rests = f"on {', '.join(judged)}" if judged else "with no signal judged"
    return "; ".join(part for part in (context, f"{standing} {rests}") if part)


def close_calls(
    items: Sequence[EvidenceItem], winner: str, classes: Sequence[str] = CLASSES
) -> tuple[CloseCall, ...]:
    """The classes that win when the signals are moved by up to CLOSE_CALL of their values
    (each signal near an edge judged in each bin it can reach, all combinations of them), each
    with the fewest signals that make it win; most likely first."""
    movable = [item for item in items if item.likelihoods and len(_reachable(item)) > 1]
    movable = sorted(movable, key=_edge_distance)[:CLOSE_CALL_MAX_MOVED]
    if not movable:
        return ()
    fixed = log_prior(classes)
    moved_names = {item.signal for item in movable}
    for item in items:
        if item.likelihoods and item.signal not in moved_names:
            fixed = fixed + np.log([item.likelihoods[name] for name in CLASSES])
    found: dict[str, tuple[int, float, tuple[MovedSignal, ...]]] = {}
    tables = [  # per movable signal: bin x class log-likelihoods
        np.log([SIGNAL_RULES[item.signal].likelihoods[name] for name in CLASSES]).T
        for item in movable
    ]
    for bins in product(*(_reachable(item) for item in movable)):
        log_post = fixed + sum(table[b] for table, b in zip(tables, bins, strict=True))
        best = CLASSES[int(np.argmax(log_post))]
        if best == winner:
            continue
        changed = tuple(
            MovedSignal(item.signal, item.value, _nearest_edge(item))
            for item, b in zip(movable, bins, strict=True)
            if b != bin_index(item.value, item.threshold_edges)
        )
        key = (len(changed), -float(np.max(log_post)))
        if best not in found or key < found[best][:2]:
            found[best] = (*key, changed)
    ordered = sorted(found.items(), key=lambda kv: (kv[1][0], kv[1][1]))
    return tuple(CloseCall(name, changed) for name, (_, _, changed) in ordered)


def _reachable(item: EvidenceItem) -> range:
    """The bins a signal reaches when moved by up to CLOSE_CALL of its value."""
    low = bin_index(item.value * (1.0 - CLOSE_CALL), item.threshold_edges)
    high = bin_index(item.value * (1.0 + CLOSE_CALL), item.threshold_edges)
    return range(min(low, high), max(low, high) + 1)


def _nearest_edge(item: EvidenceItem) -> float:
    return min(item.threshold_edges, key=lambda edge: abs(edge - item.value))


def _edge_distance(item: EvidenceItem) -> float:
    """How far, relative to its value, a signal sits from its nearest edge."""
    return abs(_nearest_edge(item) - item.value) / max(abs(item.value), 1e-12)


def _two_places_or_three(value: float) -> str:
    """0.60 as 0.60, 0.005 as 0.005: the table shows every likelihood as it is."""
    return f"{value:.2f}" if round(value, 2) == value else f"{value:.3f}"


def rules_markdown() -> str:
    """The priors and every signal rule as Markdown tables, for the generated reference page."""
    lines = ["| class | prior |", "| --- | ---: |"]
    lines += [f"| {name} | {PRIORS[name]:.2f} |" for name in CLASSES]
    lines += ["", "| signal | bin | " + " | ".join(CLASSES) + " |"]
    lines.append("| --- | --- |" + " ---: |" * len(CLASSES))
    for signal, rule in SIGNAL_RULES.items():
        for index, label in enumerate(bin_labels(rule.edges)):
            row = " | ".join(
                _two_places_or_three(rule.likelihoods[name][index]) for name in CLASSES
            )
            lines.append(f"| {signal} | {label} | {row} |")
    lines += ["", "| signal | why it matters |", "| --- | --- |"]
    lines += [f"| {signal} | {rule.rationale} |" for signal, rule in SIGNAL_RULES.items()]
    return "\n".join(lines) + "\n"


def check_rules() -> None:
    """Fail fast on a miscalibrated table: it must stay a set of probability distributions."""
    if set(PRIORS) != set(CLASSES) or not math.isclose(sum(PRIORS.values()), 1.0):
        raise ValueError("PRIORS must give every class a probability, summing to 1")
    for signal, rule in SIGNAL_RULES.items():
        if list(rule.edges) != sorted(set(rule.edges)) or not rule.edges:
            raise ValueError(f"{signal}: edges must be strictly ascending")
        if set(rule.likelihoods) != set(CLASSES):
            raise ValueError(f"{signal}: likelihoods must cover exactly {CLASSES}")
        for name in CLASSES:
            row = rule.likelihoods[name]
            if len(row) != len(rule.edges) + 1 or min(row) <= 0:
                raise ValueError(
                    f"{signal}/{name}: need {len(rule.edges) + 1} positive likelihoods"
                )
            if not math.isclose(sum(row), 1.0):
                raise ValueError(f"{signal}/{name}: likelihoods sum to {sum(row)}, not 1")


check_rules()
