"""The encoding of a text that is not UTF-8 and does not say its own: charset-normalizer's judgement, with the
commonest legacy encodings first among the equally likely (a short text reads the same in many code pages)."""
from __future__ import annotations

# charset-normalizer judges a text on this much of it (it samples inside that).
DETECT_BYTES = 256 * 1024
# When charset-normalizer finds several encodings equally likely ("café" reads the same in a dozen code pages), the
# commonest legacy ones win in this order: Windows Western, then Cyrillic.
PREFERRED_ENCODINGS = ("cp1252", "cp1251")


def guess_encodings(sample: bytes) -> list[str]:
    """The encodings charset-normalizer finds plausible for `sample`, likeliest first; empty when none reads it as
    text (binary). `sample` should end at a character boundary (a line end)."""
    from charset_normalizer import from_bytes

    matches = list(from_bytes(sample))
    if not matches:
        return []
    best = matches[0]
    ties = [m for m in matches
            if m.percent_chaos <= best.percent_chaos and m.percent_coherence >= best.percent_coherence]
    preferred = [e for e in PREFERRED_ENCODINGS if any(e == m.encoding or e in m.could_be_from_charset for m in ties)]
    return list(dict.fromkeys([*preferred[:1], *(m.encoding for m in matches)]))
