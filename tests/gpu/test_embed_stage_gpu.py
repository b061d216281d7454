"""The ingestion embed stage on a GPU in fp16 agrees with the CPU fp32 model (skipped without CUDA)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.model,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_fp16_gpu_stage_matches_cpu_model():
    from citadel.config import EmbeddingConfig
    from citadel.embedding.minilm import MiniLMEmbedder
    from indexing.stages import VECTOR, EmbedStage, arrow_to_vectors

    texts = ["Staff receive 25 days of annual leave.", "The hotel limit is 220 USD per night."] * 8
    batch = pa.table({"doc_order": pa.array(range(len(texts)), type=pa.int64()), "tenant_id": ["t"] * len(texts),
                      "status": ["published"] * len(texts), "code": pa.array([None] * len(texts), type=pa.string()),
                      "reason": pa.array([None] * len(texts), type=pa.string()),
                      "context_header": ["Policy"] * len(texts), "text": texts})
    out = EmbedStage(EmbeddingConfig(), "float16", torch_threads=1, device="cuda")(batch)
    gpu = arrow_to_vectors(out.column(VECTOR), 384)
    cpu = MiniLMEmbedder(torch_threads=1).embed_passages([f"Policy\n{t}" for t in texts])
    assert np.abs(gpu - cpu).max() < 1e-2
