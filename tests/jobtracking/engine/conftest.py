import signal

import pytest


@pytest.fixture
def own_signals():
    """For a loop's `run` in this process: it takes SIGTERM and SIGINT, as its command does;
    pytest gets them back."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
