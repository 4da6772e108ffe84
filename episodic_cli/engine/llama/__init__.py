"""Our side of llama.cpp: the backend, GGUF headers, model preparation, layer visibility, query capture."""
