"""vLLM's tokenize and detokenize, and the version route."""
