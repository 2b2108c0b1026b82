# The console is an audit record: times to the second, dates unambiguous (Django's English
# default, "Dec. 3, 2026, 2:11 p.m.", hides the seconds that tell steps apart), and each time
# names its zone (TIME_ZONE: "T" prints its abbreviation, e.g. UTC).
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
