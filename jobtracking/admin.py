from django.contrib import admin

from jobtracking.models import (
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatus,
    JobStatusChange,
    WebhookDelivery,
    WebhookSubscription,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is written by services only: nobody, superusers included, edits it here."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class StatusChangeInline(admin.TabularInline):
    model = JobStatusChange
    fields = ["changed_at", "from_status", "to_status", "attempt", "actor_type", "actor", "reason"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ExtractionJob)
class ExtractionJobAdmin(ReadOnlyAdmin):
    list_display = ["id", "file_id", "file_name", "extractor", "status", "attempt", "created_at"]
    list_filter = ["status", "extractor", "error_code"]
    search_fields = ["=id", "=file_id", "file_name", "=external_job_id"]
    list_select_related = ["extractor"]
    show_full_result_count = False
    inlines = [StatusChangeInline]


@admin.register(JobStatusChange)
class JobStatusChangeAdmin(ReadOnlyAdmin):
    list_display = ["changed_at", "job", "from_status", "to_status", "actor_type", "actor"]
    list_filter = ["to_status", "actor_type"]
    show_full_result_count = False


@admin.register(JobStatus)
class JobStatusAdmin(ReadOnlyAdmin):
    list_display = ["code", "label", "terminal", "description"]


@admin.register(ExtractionResult)
class ExtractionResultAdmin(ReadOnlyAdmin):
    list_display = ["job", "attempt", "size_bytes", "page_count", "received_at"]


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
    list_display = ["id", "type", "job", "created_at"]
    list_filter = ["type"]


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(admin.ModelAdmin):
    list_display = ["url", "active", "created_at"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["event", "subscription", "state", "attempts", "next_attempt_at"]
    list_filter = ["state"]
