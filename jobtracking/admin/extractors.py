from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm

from extraction.errors import ExtractorError
from extraction.models import Extractor
from extraction.registry import get_client
from jobtracking.admin.circuits import circuit_error, circuit_error_cell, circuit_state
from jobtracking.admin.common import record
from jobtracking.services.extractor_health import extractor_pause, extractor_resume


class ExtractorActionForm(ActionForm):
    # The admin's way to give an action an argument: a box beside the action menu.
    reason = forms.CharField(
        label="Reason (to pause):",
        required=False,
        widget=forms.TextInput(attrs={"size": 40, "placeholder": "e.g. key rotation until 14:00"}),
    )


@admin.register(Extractor)
class ExtractorAdmin(admin.ModelAdmin):
    # Eight columns, so that the list fits a laptop's screen with its last error in view: the
    # state says enabled, paused or failing in one place, the limits in words (0: unlimited).
    list_display = [
        "slug",
        "name",
        "adapter",
        "base_url",
        "state",
        "limits",
        "key_configured",
        "last_error",
    ]
    list_filter = ["adapter", "enabled"]
    list_select_related = ["health"]
    search_fields = ["slug", "name"]
    actions = ["check_connection", "pause_calls", "resume_calls"]
    action_form = ExtractorActionForm
    readonly_fields = ["key_configured", "circuit", "last_error_full", "created_at", "updated_at"]

    # Where the extractor is and which variable's key it sends: whoever may change these can
    # send that key anywhere, so they need a permission of their own.
    ENDPOINT_FIELDS = ("base_url", "api_key_env")

    def may_change_endpoint(self, request) -> bool:
        return request.user.has_perm("extraction.change_extractor_endpoint")

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if not self.may_change_endpoint(request):
            fields += self.ENDPOINT_FIELDS
        return fields

    def has_add_permission(self, request) -> bool:
        return super().has_add_permission(request) and self.may_change_endpoint(request)

    @admin.display(description="key")
    def key_configured(self, extractor: Extractor) -> str:
        # Whether the variable holds a key; the key itself is never shown. No variable named
        # means the extractor takes no key (the sandbox).
        if not extractor.api_key_env:
            return "not needed"
        if extractor.api_key():
            return f"✓ set in {extractor.api_key_env}"
        return f"✗ missing: set {extractor.api_key_env} in the environment"

    @admin.display(description="calls")
    def circuit(self, extractor: Extractor) -> str:
        return circuit_state(getattr(extractor, "health", None))

    @admin.display(description="state", ordering="enabled")
    def state(self, extractor: Extractor) -> str:
        """Disabled (takes no new job), else its calls' state: working, open, or paused."""
        if not extractor.enabled:
            return "disabled: takes no new jobs"
        return f"enabled, calls {circuit_state(getattr(extractor, 'health', None))}"

    @admin.display(description="limits")
    def limits(self, extractor: Extractor) -> str:
        def rate(kind: str) -> str:
            per_second = extractor.rate_limit(kind)
            return f"{per_second:g} {kind}s/s" if per_second else f"{kind}s unlimited"

        cap = extractor.max_in_flight
        in_flight = f"≤ {cap} in flight" if cap else "in flight unlimited"
        return f"{in_flight}; {rate('submit')}; {rate('poll')}"

    @admin.display(description="last error")
    def last_error(self, extractor: Extractor):
        return circuit_error_cell(getattr(extractor, "health", None))

    @admin.display(description="last error")
    def last_error_full(self, extractor: Extractor) -> str:
        return circuit_error(getattr(extractor, "health", None))

    def has_pause_permission(self, request) -> bool:
        return request.user.has_perm("jobtracking.pause_extractor")

    @admin.action(description="Pause calls (with a reason)", permissions=["pause"])
    def pause_calls(self, request, queryset):
        reason = request.POST.get("reason", "").strip()
        if not reason:
            self.message_user(
                request,
                "Nothing paused: write why in the reason box (it goes in each extractor's "
                "history).",
                messages.ERROR,
            )
            return
        for extractor in queryset:
            extractor_pause(extractor=extractor, reason=reason)
            record(request, [extractor], f"Calls paused: {reason}")
            self.message_user(
                request, f"{extractor.slug}: calls paused; its jobs wait.", messages.WARNING
            )

    @admin.action(description="Resume calls", permissions=["pause"])
    def resume_calls(self, request, queryset):
        reason = request.POST.get("reason", "").strip()
        for extractor in queryset.select_related("health"):
            health = getattr(extractor, "health", None)
            if health is None or not health.holding:
                self.message_user(request, f"{extractor.slug}: already working.")
                continue
            was = circuit_state(health)
            extractor_resume(extractor=extractor)
            record(
                request,
                [extractor],
                f"Calls resumed (was {was})" + (f": {reason}" if reason else "."),
            )
            self.message_user(request, f"{extractor.slug}: calls resumed.", messages.SUCCESS)

    # Sends the key to the extractor: change permission, never view alone.
    @admin.action(
        description="Check the connection (one authenticated call)", permissions=["change"]
    )
    def check_connection(self, request, queryset):
        for extractor in queryset:
            try:
                answer = get_client(extractor).check_connection()
                self.message_user(request, f"{extractor.slug}: {answer}", messages.SUCCESS)
            except ExtractorError as error:
                answer = error.message
                self.message_user(request, f"{extractor.slug}: {answer}", messages.ERROR)
            record(request, [extractor], f"Connection checked: {answer}")
