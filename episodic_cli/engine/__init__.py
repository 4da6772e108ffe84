"""The engine: ingest pipeline, segmentation, retrieval, llama.cpp backend and answering. No terminal code here."""
import os

# llama.cpp's CPU threads are OpenMP threads that spin at every barrier before they sleep; on 1-2 cores that spinning
# starves a busy machine, so they sleep (libgomp reads this once, before llama_cpp loads). An explicit OMP_WAIT_POLICY
# or GOMP_SPINCOUNT wins. Why and how much: docs/benchmarks.md, "Speed beside a busy process".
if (os.cpu_count() or 2) <= 2 and not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(os.environ):
    os.environ["OMP_WAIT_POLICY"] = "passive"
