"""When a job's timing is too noisy to trust: read from its summary metrics (torch-free, so the
sweep's summary and the report both use it). The measurements are `sweeps.train.noise`'s."""
from __future__ import annotations

# A figure is flagged unreliable when its epochs 2+ spread more than this (p90/p10 − 1), or when
# other processes kept more than this share of all cores busy during them (on average).
SPREAD_LIMIT = 0.10
OTHER_LOAD_LIMIT_PCT = 10.0


def unreliable(p10_s: float | None, p90_s: float | None, other_load_pct: float | None) -> str:
    """Why a job's epoch-time figure should not be trusted ("" when it can): its epochs spread
    more than `SPREAD_LIMIT`, or other processes loaded the host more than
    `OTHER_LOAD_LIMIT_PCT` on average."""
    why = []
    if p10_s and p90_s and p90_s / p10_s - 1 > SPREAD_LIMIT:
        why.append(f"epochs spread {100 * (p90_s / p10_s - 1):.0f}% (p90/p10)")
    if other_load_pct is not None and other_load_pct > OTHER_LOAD_LIMIT_PCT:
        why.append(f"other processes used {other_load_pct:.0f}% of the CPU")
    return "; ".join(why)
