import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
application = get_wsgi_application()

# Load every view now, then keep what start-up made out of the cyclic garbage collector's way:
# its full passes would otherwise walk the ~140,000 objects of the loaded app again and again
# (a tenth of a bulk create's CPU). A request's garbage is nearly all freed by reference
# counting, so the collector runs after 50,000 new objects rather than 700: a bulk create
# made it run fifteen times, 8-11 ms of its CPU; now once every few requests, 3-4 ms.
get_resolver().url_patterns  # noqa: B018 (imports the URLconf and every view module)
gc.freeze()
gc.set_threshold(50_000, 20, 10)
