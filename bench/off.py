"""Engine features off, for benchmarks' "without" runs only: the product has no such toggle.

`swapped(feature)` swaps the functions that do a feature for stand-ins in this process while it
lasts; `Off`, which `bench.off_settings` installs, swaps them for good in the processes started
on those settings (the features `BENCH_OFF` names, comma-separated)."""

from contextlib import ExitStack, contextmanager
from unittest import mock

from django.apps import AppConfig
from django.conf import settings


def _unchained(change, job) -> None:
    change.prev_hash = change.hash = ""  # and the job's head unmoved: no column more to write


# Each feature's functions, where the state machine imports them, and their stand-ins.
SWAPS = {
    "usage": {"jobtracking.services.transitions.usage_row": lambda *_args, **_kwargs: None},
    "chaining": {
        "jobtracking.services.transitions.chain_change": _unchained,
        "jobtracking.services.creation.chain_change": _unchained,
    },
}


def _patches(feature: str) -> list:
    return [mock.patch(target, stand_in) for target, stand_in in SWAPS[feature].items()]


@contextmanager
def swapped(feature: str):
    with ExitStack() as stack:
        for patch in _patches(feature):
            stack.enter_context(patch)
        yield


class Off(AppConfig):
    name = "bench.off"
    label = "bench_off"

    def ready(self) -> None:
        for feature in settings.BENCH_OFF:
            for patch in _patches(feature):
                patch.start()  # never stopped: the process runs without the feature
