"""Memory text: validating what gets stored, and turning a question into a tsquery.

Stored content is trimmed text of at most MAX_CONTENT_CHARS (4,000) characters:
enough for a paragraph, small enough to inject several memories into a prompt.
(The offline model embeds only the first 512 tokens of a text, so the meaning of
a long memory is judged by its beginning; full text covers all of it.)

## The lexical leg of memory search

The `memories.content_tsv` column uses PostgreSQL's 'simple' configuration (no
stemming, no stop words), which treats Korean and English alike. The query side
makes up for the missing language smarts with a few cheap rules:

- English stop words and question words are dropped ("what is my …");
- Korean particles are stripped from the end of a word ("생일은" → "생일");
- common English suffixes are cut ("renewal" → "renew") and every word of three
  or more letters matches as a prefix, so "renew" finds "renews" and "생일"
  finds "생일은".

The remaining terms are scored with BM25 in PostgreSQL (service.py): a memory
needs only one of them to be a candidate, and rare terms (a name, a code) weigh
far more than common ones. The first version AND-ed all words instead; it
returned anything for only 18% of long-conversation questions
(bench/memory_recall.py, BENCHMARKS.md).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

MAX_CONTENT_CHARS = 4_000
MAX_CATEGORY_CHARS = 40
SOURCES = ("tool", "compaction", "import", "link")  # link: a conversation a join did not keep


class MemoryInputError(ValueError):
    """Bad input from the user or the model; the message says what is valid."""


def clean_content(text: Any) -> str:
    """Trimmed memory text, or MemoryInputError when empty or too long."""
    if not isinstance(text, str):
        raise MemoryInputError("content must be text.")
    text = text.replace("\x00", "").strip()
    if not text:
        raise MemoryInputError("content is empty; give the fact to remember as one sentence.")
    if len(text) > MAX_CONTENT_CHARS:
        raise MemoryInputError(
            f"content is {len(text):,} characters; a memory holds at most "
            f"{MAX_CONTENT_CHARS:,}. Save the key facts as one or more short memories."
        )
    return text


def clean_category(category: Any) -> str:
    """A short lowercase label (letters, digits, '_', '-'); 'general' when blank."""
    text = str(category or "").strip().lower()
    text = re.sub(r"[^\w-]+", "_", text).strip("_")[:MAX_CATEGORY_CHARS]
    return text or "general"


def parse_memory_id(value: Any) -> uuid.UUID:
    """The UUID in `value`, or MemoryInputError saying what an id looks like."""
    try:
        return uuid.UUID(str(value).strip())
    except (ValueError, AttributeError):
        raise MemoryInputError(
            f"{str(value)[:60]!r} is not a memory id; ids look like "
            "'0b7c9a9e-4c1d-4a53-9d55-6f1e2a3b4c5d' (use memory_search to find them)."
        ) from None


def same_text(a: str, b: str) -> bool:
    """The same words in the same order, up to case, punctuation and spacing."""
    return normalise(a) == normalise(b)


def check_source(source: str) -> None:
    """MemoryInputError unless `source` is one the table accepts."""
    if source not in SOURCES:
        raise MemoryInputError(f"source must be one of {', '.join(SOURCES)}; got {source!r}.")


def fit_content(text: str) -> str:
    """`text` trimmed and, when over-long, cut at a word near the limit (for batch saves)."""
    text = text.replace("\x00", "").strip()
    if len(text) <= MAX_CONTENT_CHARS:
        return text
    cut = text[: MAX_CONTENT_CHARS - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut[-200:] else cut) + "…"


# -- full-text query ----------------------------------------------------------------------

_STOPWORD_TEXT = """
    a an the i me my mine myself you your we our us they them their he him his she her it
    its is are was were be been being am do does did doing have has had what when where who
    whom which why how to of in on at for with about from by as into and or but not no so if
    then than that this these those there here can could should would will shall may might
    must any some all please tell remember know again also just get got let lets s t
    나 내 제 저 너 뭐 뭐야 뭐지 언제 어디 누구 어떻게 무엇 무슨 왜 좀 그 이 저기 거 것"""
_PARTICLE_TEXT = (
    "은 는 이 가 을 를 의 에 로 와 과 도 만 랑 께 요 야 이랑 에서 에게 한테 으로 까지 부터 처럼 "
    "보다 이나 이야 이에요 예요 에서는 으로는 에게서 한테서 이라고 라고"
)
_SUFFIX_TEXT = "ations ation ments ment ings ing ies ied ed es al s"
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
KO_PARTICLES = tuple(sorted(_PARTICLE_TEXT.split(), key=len, reverse=True))
EN_SUFFIXES = tuple(_SUFFIX_TEXT.split())
HANGUL = re.compile(r"[\uac00-\ud7a3]")
# Tokens as PostgreSQL's default parser sees them: emails and dotted names (hosts, versions,
# decimals) stay whole, everything else splits into \w+ runs.
TOKEN = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|\w+(?:\.\w+)+|\w+")
MAX_TERMS = 16
MIN_STEM = 4


def _strip_suffix(token: str, suffixes: tuple[str, ...], keep: int) -> str:
    for suffix in suffixes:
        if token.endswith(suffix) and len(token) - len(suffix) >= keep:
            return token[: -len(suffix)]
    return token


@dataclass(frozen=True)
class QueryTerm:
    """One lexical search term: an exact lexeme, or a prefix of lexemes."""

    text: str
    prefix: bool


def _terms(token: str) -> list[QueryTerm]:
    """The search terms for one query word (none for words that carry no meaning)."""
    if token in STOPWORDS:
        return []
    if HANGUL.search(token):
        token = _strip_suffix(token, KO_PARTICLES, 2)
        if token in STOPWORDS:
            return []
        return [QueryTerm(token, len(token) >= 2)]
    if token.isdigit():  # "QZX-4417" is parsed as 'qzx' and the signed integer '-4417'
        return [QueryTerm(token, False), QueryTerm(f"-{token}", False)]
    if "." in token or "@" in token:
        return [QueryTerm(token, True)]
    if len(token) < 2:
        return []
    token = _strip_suffix(token, EN_SUFFIXES, MIN_STEM)
    return [QueryTerm(token, len(token) >= 3)]


def query_terms(text: str) -> list[QueryTerm]:
    """The query's meaningful words as lexical search terms (at most MAX_TERMS, no repeats).

    Terms are plain lexemes (word characters, plus . @ + - inside emails and dotted names);
    the service passes them as query parameters, never as tsquery syntax.
    """
    terms: list[QueryTerm] = []
    for token in TOKEN.findall(text.casefold()):
        for term in _terms(token.strip("_")):
            if term.text.strip("_") and term not in terms:
                terms.append(term)
    return terms[:MAX_TERMS]


_NOT_WORD = re.compile(r"[\W_]+")


def normalise(text: str) -> str:
    """`text` for duplicate detection: case-folded, punctuation and spacing removed."""
    return " ".join(_NOT_WORD.sub(" ", text.casefold()).split())
