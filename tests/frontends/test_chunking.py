"""Tests for panager.frontends.shared.chunking.split_message."""

from __future__ import annotations

import re

import pytest

from panager.frontends.shared.chunking import split_message

_REOPEN = re.compile(r"```[^\s`]*\n")


def _in_fence(text: str) -> bool:
    """Whether the end of ``text`` lies inside a code fence."""
    return text.count("```") % 2 == 1


def _bodies(chunk: str, inside_at_start: bool, last: bool) -> list[str] | None:
    """Candidate contents of ``chunk`` once the splitter's added fences are removed.

    A chunk starting inside a code block must begin with an added "```lang" line;
    a non-final chunk may end with an added "```" or "\n```" closing fence.
    """
    if inside_at_start:
        header = _REOPEN.match(chunk)
        if header is None:
            return None
        chunk = chunk[header.end() :]
    closes = [] if last else [t for t in ("```", "\n```") if chunk.endswith(t)]
    return [chunk] + [chunk[: -len(tail)] for tail in closes]


def _restores(chunks: list[str], text: str, offset: int = 0) -> bool:
    """Whether dropping added fence lines from ``chunks`` gives ``text[offset:]``.

    Trailing whitespace may be missing: a whitespace-only last chunk is dropped.
    """
    if not chunks:
        return not text[offset:].strip()
    last = len(chunks) == 1
    bodies = _bodies(chunks[0], _in_fence(text[:offset]), last)
    for index, body in enumerate(bodies or []):
        end = offset + len(body)
        closed_here = index > 0
        if not text.startswith(body, offset):
            continue
        if not last and closed_here != _in_fence(text[:end]):
            continue
        if _restores(chunks[1:], text, end):
            return True
    return False


def check(text: str, limit: int = 2000) -> list[str]:
    """Split ``text`` and assert every invariant of split_message."""
    chunks = split_message(text, limit)
    assert all(len(chunk) <= limit for chunk in chunks)
    assert all(chunk.count("```") % 2 == 0 for chunk in chunks)
    assert all(chunk.strip() for chunk in chunks)
    assert _restores(chunks, text)
    return chunks


def _prose(words: int, seed: str = "word") -> str:
    return " ".join(f"{seed}{i}" for i in range(words))


def _answer_with_code() -> str:
    intro = "\n\n".join(_prose(40, f"p{n}w") for n in range(6))
    code_lines = [f"    total += compute_value({i}, factor={i * 3})  # step {i}" for i in range(50)]
    code = "```python\ndef main():\n    total = 0\n" + "\n".join(code_lines) + "\n```"
    outro = "\n\n".join(_prose(30, f"q{n}w") for n in range(4))
    return f"{intro}\n\n{code}\n\n{outro}"


def test_empty_and_whitespace_give_no_chunks() -> None:
    assert split_message("") == []
    assert split_message(" \n\n ") == []


def test_short_text_is_one_chunk() -> None:
    assert split_message("hello\n\nworld") == ["hello\n\nworld"]


def test_answer_with_code_block_in_the_middle() -> None:
    text = _answer_with_code()
    assert 4500 <= len(text) <= 6000
    chunks = check(text)
    assert len(chunks) >= 3
    reopened = [i for i, chunk in enumerate(chunks) if i > 0 and chunk.startswith("```python\n")]
    assert any(chunks[i - 1].endswith("\n```") for i in reopened), "code block was not split"


def test_prefers_paragraph_breaks() -> None:
    first, second = _prose(300, "aa"), _prose(150, "b")
    assert len(first) + len(second) > 2000
    chunks = check(f"{first}\n\n{second}")
    assert chunks == [f"{first}\n\n", second]


def test_long_single_token_is_hard_split() -> None:
    text = "x" * 4500
    chunks = check(text)
    assert len(chunks) == 3
    assert "".join(chunks) == text


def test_long_single_line_splits_at_spaces() -> None:
    text = _prose(900)
    chunks = check(text)
    assert len(chunks) >= 3
    assert all(chunk.endswith(" ") for chunk in chunks[:-1])


def test_korean_text() -> None:
    text = " ".join(["안녕하세요 오늘 일정은 회의와 점심 약속입니다."] * 200)
    chunks = check(text)
    assert len(chunks) >= 3
    assert all(chunk.endswith(" ") for chunk in chunks[:-1])
    assert "".join(chunks) == text


def test_code_block_without_language_is_reopened_plainly() -> None:
    code = "\n".join(f"line {i} " + "z" * 30 for i in range(120))
    chunks = check(f"```\n{code}\n```")
    assert len(chunks) >= 2
    assert all(chunk.startswith("```\n") for chunk in chunks)


def test_no_chunk_ends_with_an_empty_code_block() -> None:
    text = _prose(330) + "\n```js\n" + "\n".join("let a = 1;" for _ in range(100)) + "\n```"
    chunks = check(text)
    assert not any(chunk.endswith("```js\n```") for chunk in chunks)


def test_long_line_inside_code_block() -> None:
    text = "```text\n" + "y" * 3000 + "\n```"
    chunks = check(text)
    assert chunks[0].endswith("\n```")
    assert chunks[1].startswith("```text\n")


def test_whitespace_only_chunks_are_dropped() -> None:
    chunks = split_message("a" * 1990 + " " * 5000 + "b")
    assert [chunk.strip() for chunk in chunks] == ["a" * 1990, "b"]


def test_limit_too_small_is_rejected() -> None:
    with pytest.raises(ValueError):
        split_message("hello", limit=10)


def test_property_invariants() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    pieces = st.sampled_from(
        ["a", "bc", " ", "\n", "\n\n", "```", "```py\n", "한글", "`", "x" * 40]
    )
    texts = st.lists(pieces, max_size=120).map("".join)

    @hypothesis.settings(max_examples=150, deadline=None)
    @hypothesis.given(text=texts, limit=st.integers(min_value=50, max_value=120))
    def run(text: str, limit: int) -> None:
        hypothesis.assume(text.strip() and not re.search(r"\s{20}", text))
        if text.count("```") % 2:
            text += "\n```"
        check(text, limit)

    run()
