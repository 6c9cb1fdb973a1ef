"""Anthropic's Messages API, and its token count."""
