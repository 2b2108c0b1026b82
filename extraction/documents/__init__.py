"""Each protocol's result read into the one shape (`extraction.results.Document`)."""
