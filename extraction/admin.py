from django.contrib import admin, messages

from extraction.errors import ExtractorError
from extraction.models import Extractor
from extraction.registry import get_client
from jobtracking.admin.common import record


@admin.register(Extractor)
class ExtractorAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "name",
        "adapter",
        "base_url",
        "model_id",
        "enabled",
        "max_in_flight",
        "submit_rate",
        "poll_rate",
        "key_configured",
    ]
    list_filter = ["adapter", "enabled"]
    search_fields = ["slug", "name"]
    actions = ["check_connection"]
    readonly_fields = ["key_configured", "created_at", "updated_at"]

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
