# The console is an audit record: times to the second, dates unambiguous (Django's English
# default, "Dec. 3, 2026, 2:11 p.m.", hides the seconds that tell steps apart).
DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
