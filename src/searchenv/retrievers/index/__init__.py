"""A saved index on disk: metadata and atomic publishing (:mod:`.metadata`), the document store (:mod:`.docstore`)."""
