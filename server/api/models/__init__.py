"""OpenAI's model list and model card."""
