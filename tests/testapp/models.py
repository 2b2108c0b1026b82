"""A model with the field kinds `jobtracking.infra.rows` must write as `bulk_create` does,
beyond those the service's models have today."""

import uuid

from django.contrib.postgres.functions import TransactionNow
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models.functions import Upper


class TagsField(models.TextField):
    """Tags kept as one comma-separated text: a field whose `get_db_prep_save` transforms what
    it saves, so that a writer bypassing it stores something else."""

    def get_db_prep_save(self, value, connection):
        if isinstance(value, list):
            value = ",".join(value)
        return super().get_db_prep_save(value, connection)

    def from_db_value(self, value, expression, connection):
        return value.split(",") if value else []


class Specimen(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    name = models.CharField(max_length=50)
    # A null here is not the default: a row must tell a key left out from a null.
    count = models.IntegerField(db_default=7, null=True)
    note = models.TextField(db_default="100% default")
    # The transaction's time, the same for both writers of one test.
    stamped_at = models.DateTimeField(db_default=TransactionNow())
    shout = models.GeneratedField(
        expression=Upper("name"), output_field=models.CharField(max_length=50), db_persist=True
    )
    data = models.JSONField(default=dict)
    encoded = models.JSONField(null=True, encoder=DjangoJSONEncoder)
    document = models.FileField(upload_to="specimens/", blank=True)
    price = models.DecimalField(max_digits=8, decimal_places=3, null=True)
    wait = models.DurationField(null=True)
    at = models.TimeField(null=True)
    blob = models.BinaryField(null=True)
    address = models.GenericIPAddressField(null=True)
    touched_at = models.DateTimeField(auto_now=True)
    tags = TagsField(default=list)

    def __str__(self) -> str:
        return self.name
