import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
application = get_wsgi_application()

# Load every view now, then keep what start-up made out of the cyclic garbage collector's way:
# its full passes would otherwise walk the ~140,000 objects of the loaded app again and again
# (a tenth of a bulk create's CPU).
get_resolver().url_patterns  # noqa: B018 (imports the URLconf and every view module)
gc.freeze()
