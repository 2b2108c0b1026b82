"""The engine with usage recording off, for `bench.usage`'s "without" runs only: an app whose
`ready` makes the state machine write no usage rows (`bench.usage_off_settings` installs it)."""

from django.apps import AppConfig


class UsageOff(AppConfig):
    name = "bench.usage_off"
    label = "bench_usage_off"

    def ready(self) -> None:
        from jobtracking.services import transitions

        transitions.usage_row = lambda job, billed_pages, now: None
