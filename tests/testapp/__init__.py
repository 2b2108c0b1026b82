"""Models the tests need and the service does not: installed by the test settings only, and
without migrations (the test database creates their tables as they are)."""
