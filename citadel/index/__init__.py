"""Index adapters: exact (numpy), HNSW (faiss), DiskANN (diskannpy), BM25 (tantivy)."""
