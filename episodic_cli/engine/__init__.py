"""The engine: ingest pipeline, segmentation, retrieval, llama.cpp backend and answering. No terminal code here."""
