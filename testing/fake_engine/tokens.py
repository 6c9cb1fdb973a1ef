"""The fake engine's tokens: whitespace-separated words with their leading space.

>>> split_tokens("two  words ")
['two', '  words', ' ']
"""

from __future__ import annotations

import re
import zlib
from typing import Any


def split_tokens(text: str) -> list[str]:
    pieces: list[str] = re.findall(r"\s*\S+", text)
    rest = text[len("".join(pieces)) :]
    return [*pieces, rest] if rest else pieces


def common_prefix(a: list[str], b: list[str]) -> int:
    mismatches = (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    return next(mismatches, min(len(a), len(b)))


def token_id(piece: str) -> int:
    return 100 + zlib.crc32(piece.encode()) % 50_000


def prompt_text(body: dict[str, Any]) -> str:
    if "messages" in body:
        parts = []
        for m in body["messages"]:
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            parts.append(f"{m.get('role')}: {content or ''}")
        return "\n".join(parts)
    return str(body.get("prompt", ""))
