"""Scores of detected change points against human annotations, as TCPD defines them.

van den Burg & Williams (2020, arXiv:2003.06222), "An Evaluation of Change Point Detection
Algorithms": the benchmark our detector is measured on. Both scores treat index 0 as a change
point in every annotation and in the prediction (the start of the first regime), so a series
without changes that gets no detections scores 1, and one false alarm halves its precision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

MARGIN = 5  # TCPD: a detection within 5 points of an annotated change counts


def true_positives(truth: Iterable[int], predicted: Iterable[int], margin: int = MARGIN) -> set:
    """The annotated points matched by a detection within `margin`, each detection used once.

    Annotations are visited in increasing order and each takes the closest unused detection
    (the smaller index on a tie), so two annotations cannot share one detection.
    """
    free = set(predicted)
    matched = set()
    for tau in sorted(set(truth)):
        close = [(abs(tau - x), x) for x in free if abs(tau - x) <= margin]
        if close:
            matched.add(tau)
            free.discard(min(close)[1])
    return matched


def f_measure(
    annotations: Mapping[str, Iterable[int]], predicted: Iterable[int], margin: int = MARGIN
) -> tuple[float, float, float]:
    """(F1, precision, recall) of `predicted` against several annotators.

    Precision is measured against the union of all annotators' points; recall is averaged over
    annotators, so agreeing with most annotators beats matching one exhaustively.
    """
    per_annotator = [set(points) | {0} for points in annotations.values()]
    detections = set(predicted) | {0}
    union = set().union(*per_annotator)
    precision = len(true_positives(union, detections, margin)) / len(detections)
    recall = float(
        np.mean([len(true_positives(t, detections, margin)) / len(t) for t in per_annotator])
    )
    return 2.0 * precision * recall / (precision + recall), precision, recall


def covering(annotations: Mapping[str, Iterable[int]], predicted: Iterable[int], n: int) -> float:
    """Mean over annotators of how well the predicted regimes cover the annotated ones.

    Cover(G, S) = sum over annotated segments A of |A| * max over predicted segments A' of the
    Jaccard index |A n A'| / |A u A'|, divided by n (Arbelaez et al. 2011, as used in TCPD).
    """
    mine = _segments(predicted, n)
    return float(
        np.mean([_cover(_segments(points, n), mine, n) for points in annotations.values()])
    )


def _segments(points: Iterable[int], n: int) -> np.ndarray:
    """[start, end) of the regimes that change points split range(n) into, shape (k, 2)."""
    bounds = np.unique(np.clip([0, *points, n], 0, n))
    return np.column_stack([bounds[:-1], bounds[1:]])


def _cover(truth: np.ndarray, predicted: np.ndarray, n: int) -> float:
    starts = np.maximum(truth[:, None, 0], predicted[None, :, 0])
    ends = np.minimum(truth[:, None, 1], predicted[None, :, 1])
    overlap = np.clip(ends - starts, 0, None)
    sizes_t, sizes_p = np.diff(truth).ravel(), np.diff(predicted).ravel()
    jaccard = overlap / (sizes_t[:, None] + sizes_p[None, :] - overlap)
    return float(np.sum(sizes_t * jaccard.max(axis=1)) / n)
