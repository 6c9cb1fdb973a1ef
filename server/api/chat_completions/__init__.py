"""OpenAI's chat completions (and the chat-completion body shapes the others reuse)."""
