"""EpMAN's episodic weights: how much each retrieved event's block counts in a kv-mode answer (--epman)."""
from __future__ import annotations

from .retrieve import RetrievedEvent, owning_hit

EPMAN_FLOOR = 0.9  # EpMAN's weights are relative; keeping them in [0.9, 1.0] nudges attention without silencing a block


def episodic_weights(retrieved: list[RetrievedEvent]) -> list[float]:
    """EpMAN-style episodic weight per retrieved event (seed 000, eq. 1), mapped to [EPMAN_FLOOR, 1.0]: the best hit
    gets 1.0, the weakest hit the floor, linearly in the fused retrieval score; a neighbour gets the weight of the
    nearest hit of its document (it was retrieved for that hit)."""
    hits = [r for r in retrieved if r.score is not None]
    if not hits:
        return [1.0] * len(retrieved)
    lo, hi = min(r.score for r in hits), max(r.score for r in hits)

    def of_hit(r: RetrievedEvent) -> float:
        return 1.0 if hi == lo else EPMAN_FLOOR + (1.0 - EPMAN_FLOOR) * (r.score - lo) / (hi - lo)

    return [of_hit(owning_hit(r, hits)) for r in retrieved]
