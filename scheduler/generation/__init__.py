"""Serving decoder language models: the compiled model (prefill and decode programs with their tokenizer), the
sequences being generated, their resident KV cache and the engine that steps them all at once."""
