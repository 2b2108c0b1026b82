from django.db import migrations

GROUP = "API clients"
PERMISSIONS = [
    ("jobtracking", "extractionjob", "view_extractionjob"),
    ("jobtracking", "extractionjob", "add_extractionjob"),
    ("jobtracking", "extractionjob", "cancel_extractionjob"),
    ("jobtracking", "extractionjob", "requeue_extractionjob"),
    ("extraction", "extractor", "view_extractor"),
]


def create_group(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=GROUP)
    for app_label, model, codename in PERMISSIONS:
        group.permissions.add(
            Permission.objects.get(
                content_type__app_label=app_label, content_type__model=model, codename=codename
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("jobtracking", "0004_api"),
        ("extraction", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_group, migrations.RunPython.noop)]
