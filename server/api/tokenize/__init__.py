"""vLLM's tokenize and detokenize."""
