"""OpenAI's text completions."""
