from django.contrib import admin

from extraction.models import Extractor


@admin.register(Extractor)
class ExtractorAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "adapter", "base_url", "enabled", "max_in_flight"]
    list_filter = ["adapter", "enabled"]
    search_fields = ["slug", "name"]
