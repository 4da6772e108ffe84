"""The engine: ingest pipeline, segmentation, retrieval, llama.cpp backend and answering. No terminal code here."""
import os

# llama.cpp's CPU threads are OpenMP (libgomp) threads, which spin at every barrier before they sleep; libgomp reads
# this once, when llama.cpp loads, so it is set here, before any engine module imports llama_cpp. On 1-2 cores,
# answer tokens run on one thread (llama_backend.generation_threads) and only batches have barriers: sleeping there
# cost ~9% idle and kept ingest at 0.6x of idle beside one busy process (2 threads spinning: 0.4x; beside two, 5x
# faster than spinning). On more cores answers run multi-threaded, and sleeping at their barriers made 2-thread
# answers 3x slower idle, so libgomp's default stays. An explicit OMP_WAIT_POLICY or GOMP_SPINCOUNT always wins.
# Measured by bench/under_load.py (docs/benchmarks.md, "Speed beside a busy process").
if (os.cpu_count() or 2) <= 2 and not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(os.environ):
    os.environ["OMP_WAIT_POLICY"] = "passive"
