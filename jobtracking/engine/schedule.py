"""When to act next: exponential backoff with jitter that never undercuts Retry-After."""

import random
from datetime import timedelta

BACKOFF_FACTOR = 1.5


def next_delay(
    step: int,
    *,
    initial: timedelta,
    cap: timedelta,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> timedelta:
    """The wait before action number `step` (0-based) of a series.

    Step 0 waits exactly `initial`; later steps grow by a factor of 1.5 up to `cap`, less up to
    20% jitter so that jobs created together spread out. The extractor's Retry-After always wins
    when it is longer.
    """
    base = min(cap.total_seconds(), initial.total_seconds() * BACKOFF_FACTOR**step)
    seconds = base if step == 0 else (rng or random).uniform(0.8 * base, base)
    return timedelta(seconds=max(seconds, retry_after or 0.0))
