"""Finding what an answer reads: retrieval, scope, evidence narrowing and quotes, citations."""
