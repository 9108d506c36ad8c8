"""Documents: extracted in the limited decoder, stored per person, found by document_search
with the memory search, framed for the model; the Files page never serves them as pages.
Real PostgreSQL and graph; the model and embeddings are the fake OpenAI server."""

from __future__ import annotations

import pytest

from panager.agent.graph.tool import CallView, classify_call
from panager.agent.tools import build_tools
from panager.errors import ToolError
from panager.frontends.web.server import start_web
from tests.fakes.openai_server import tool_call
from tests.media_files import (
    docx,
    docx_billion_laughs,
    docx_zip_bomb,
    encrypted_pdf,
    pdf,
)
from tests.runtime_helpers import write_config
from tests.scheduler_helpers import RecordingMessenger
from tests.web_helpers import ALICE, BOB, WebHarness

ME, OTHER = 7101, 7102
PHRASE = "the heron nests beside the copper mill"


def long_pdf(pages: int = 12, at: int = 7) -> bytes:
    filler = " ".join(f"Sentence {j} says the rent is due monthly." for j in range(12))
    texts = [f"Page {i} of the lease. {filler}" for i in range(1, 13)]
    texts = (texts * (pages // 12 + 1))[:pages]
    texts[at - 1] = f"Clause {at}: {PHRASE}."
    return pdf(texts)


def long_docx() -> bytes:
    paragraphs = [f"Paragraph {i} of the school letter about trips and fees." for i in range(40)]
    paragraphs[22] = f"In the middle: {PHRASE}."
    return docx(paragraphs, page_every=5)


@pytest.fixture
async def start(make_app, openai, tmp_path):
    async def make(**config):
        write_config(tmp_path / "home", **config)
        app = await make_app(openai_base_url=openai.base_url, openai_api_key="test")
        await app.deps.users.ensure(ME, "me")
        await app.deps.users.ensure(OTHER, "other")
        return app

    return make


@pytest.mark.parametrize(("name", "data", "page"), [
    ("lease.pdf", long_pdf(), 7), ("letter.docx", long_docx(), None)])
async def test_a_phrase_from_the_middle_is_found(start, name, data, page):
    app = await start()
    att = await app.deps.media.take(ME, name, data)
    assert att.kind == "document" and att.notice == "", att.notice
    assert PHRASE in att.text and att.details["document_id"]
    hits = await app.deps.media.documents.search(ME, "where does the heron nest?")
    assert hits and PHRASE in hits[0].content and hits[0].name == name
    assert hits[0].page == page
    assert await app.deps.media.documents.search(OTHER, "heron copper mill") == []


async def test_the_turn_that_brings_a_document_gets_it_framed_and_later_turns_search(
    start, openai
):
    app = await start()
    user = await app.deps.users.get(ME)
    att = await app.deps.media.take(ME, "lease.pdf", long_pdf())
    openai.script("It is a lease.")
    result = await app.assistant.run_turn(user, "what is this?", attachments=[att])
    assert result.text == "It is a lease."
    framed = [m for m in openai.requests[-1]["messages"] if m.get("name") == "attachments"][-1]
    assert framed["content"].startswith('<outside_content source="attachment lease.pdf">')
    assert PHRASE in framed["content"] and att.details["document_id"] in framed["content"]
    # a later turn: the document is not injected; the model searches it
    openai.script(tool_call("document_search", {"query": "heron"}), "Beside the copper mill.")
    result = await app.assistant.run_turn(user, "where do herons nest, says my lease?")
    assert result.text == "Beside the copper mill."
    first_call = openai.requests[-2]["messages"]
    assert PHRASE not in str([m for m in first_call if m["role"] != "user"])
    tool_result = next(m for m in openai.requests[-1]["messages"] if m["role"] == "tool")
    assert tool_result["content"].startswith("<outside_content") and PHRASE in tool_result["content"]


async def test_list_and_forget_tools(start):
    app = await start()
    user = await app.deps.users.get(ME)
    att = await app.deps.media.take(ME, "letter.docx", long_docx())
    tools = {t.name: t for t in build_tools(app.deps, user)}
    listed = await tools["document_list"].ainvoke({})
    assert "letter.docx" in listed and att.details["document_id"] in listed
    view = CallView(person_text="", tainted=False, unattended=False)
    assert classify_call(tools["document_search"], {"query": "x"}, view) == "ordinary"
    assert classify_call(tools["document_list"], {}, view) == "ordinary"
    assert classify_call(tools["document_forget"], {"document_id": "x"}, view) == "consequential"
    other = {t.name: t for t in build_tools(app.deps, await app.deps.users.get(OTHER))}
    assert "letter.docx" not in await other["document_list"].ainvoke({})
    with pytest.raises(ToolError, match="No document with id"):  # never another person's
        await other["document_forget"].ainvoke({"document_id": att.details["document_id"]})
    result = await tools["document_forget"].ainvoke({"document_id": att.details["document_id"]})
    assert result["ok"]
    assert await app.deps.media.documents.search(ME, "heron copper mill") == []


async def test_a_2000_page_pdf_stops_at_the_page_cap_with_a_line(start):
    app = await start(document_max_pages=300)
    att = await app.deps.media.take(ME, "manual.pdf", long_pdf(2000, at=150))
    assert att.kind == "document"
    assert att.notice == "manual.pdf has 2,000 pages; I read the first 300 (the page limit)."
    assert att.details["read_pages"] == 300 and "[page 300]" in att.text
    assert "[page 301]" not in att.text


@pytest.mark.parametrize(("name", "data", "why"), [
    ("bomb.docx", docx_zip_bomb(), "it expands to far more than its size (a zip bomb)"),
    ("laughs.docx", docx_billion_laughs(),
     "it declares XML entities (a billion-laughs file), so it is refused"),
    ("locked.pdf", encrypted_pdf(["secret text"]),
     "it is encrypted (password-protected); send an unprotected copy"),
    ("broken.pdf", b"%PDF-1.4\n1 0 obj garbage", "it is not a readable PDF (damaged or not really a PDF)"),
])
async def test_bombs_encrypted_and_corrupt_documents_are_refused(start, openai, name, data, why):
    # a 256 MB address space for the decoder: refused by the checks, not by running out
    app = await start(decode_memory_mb=256)
    att = await app.deps.media.take(ME, name, data)
    assert att.kind == "rejected" and att.notice == f"I couldn't use {name}: {why}."
    assert await app.deps.media.documents.list(ME) == []
    openai.script("Your words, answered.")
    user = await app.deps.users.get(ME)
    result = await app.assistant.run_turn(user, "and my question?", attachments=[att])
    assert result.text == "Your words, answered."


async def test_documents_stay_within_the_quota(start):
    app = await start(document_quota_bytes=500_000)  # one 200-page PDF: ~300 kB
    first = await app.deps.media.take(ME, "a.pdf", long_pdf(200))
    assert first.details.get("document_id")
    second = await app.deps.media.take(ME, "b.pdf", long_pdf(200))
    assert "document_id" not in second.details and "could not keep it" in second.notice
    assert second.kind == "document"  # the turn still gets its text
    assert [d.name for d in await app.deps.media.documents.list(ME)] == ["a.pdf"]


async def test_text_csv_markdown_and_html_are_read(start):
    app = await start()
    html = b"<!DOCTYPE html><html><script>alert(1)</script><p>Visible words</p></html>"
    for name, data, expect in [("notes.md", b"# Title\n\nsome notes", "some notes"),
                               ("t.csv", b"a,b\n1,2\n", "a,b"),
                               ("page.html", html, "Visible words")]:
        att = await app.deps.media.take(ME, name, data)
        assert att.kind == "document" and expect in att.text, (name, att)
        assert "alert" not in att.text


async def test_the_files_page_lists_shows_and_deletes_but_never_renders_uploads(
    start, tmp_path
):
    app = await start()
    await app.deps.users.ensure(ALICE, "alice", display_name="Alice")
    await app.deps.users.ensure(BOB, "bob", display_name="Bob")
    evil = (b"<!DOCTYPE html><html><body><script>document.title='pwned'</script>"
            b"<svg onload=alert(1)></svg><p>Harmless words</p></body></html>")
    att = await app.deps.media.take(ALICE, "evil.html", evil)
    doc_id = att.details["document_id"]
    server = await start_web(app, port=0)
    h = WebHarness(app, server, RecordingMessenger(), None)
    alice, bob = await h.client(ALICE), await h.client(BOB)
    try:
        status, body = await alice.get("/files")
        assert status == 200 and "evil.html" in body
        status, body = await alice.get(f"/files/{doc_id}")
        assert status == 200 and "Harmless words" in body and "<script>document" not in body
        async with alice.session.get(f"{h.url}/files/{doc_id}/download") as response:
            assert response.headers["Content-Type"] == "application/octet-stream"
            assert response.headers["Content-Disposition"].startswith("attachment;")
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert "sandbox" in response.headers["Content-Security-Policy"]
            assert await response.read() == evil
        assert (await bob.get(f"/files/{doc_id}"))[0] == 404
        async with bob.session.get(f"{h.url}/files/{doc_id}/download") as response:
            assert response.status == 404
        assert (await bob.post(f"/files/{doc_id}/delete", {}))[0] == 404
        status, _ = await alice.post(f"/files/{doc_id}/delete", {})
        assert status == 200 and await app.deps.media.documents.list(ALICE) == []
    finally:
        await alice.close()
        await bob.close()
        await server.stop()


async def test_a_person_with_many_passages_is_searched_through_the_index(start, monkeypatch):
    """Past EXACT_MAX passages the vector leg goes through document_chunks' HNSW index (as
    memory does); the phrase is still found, and nobody else's passages are."""
    from panager.services.memory import retrieval

    app = await start()
    documents = app.deps.media.documents
    await app.deps.media.take(ME, "lease.pdf", long_pdf(pages=60, at=47))
    await app.deps.media.take(OTHER, "other.pdf", long_pdf(at=3))
    monkeypatch.setattr(retrieval, "EXACT_MAX", 2)
    documents.retrieval._sizes.clear()
    hits = await documents.search(ME, "where does the heron nest?")
    assert hits and PHRASE in hits[0].content and hits[0].page == 47
    assert documents.retrieval.exact_fallbacks == 0  # enough of ME's rows came from the index
    assert {h.document_id for h in hits} == {d.id for d in await documents.list(ME)}
    assert documents.retrieval._known_to_use_index(ME)
    async with app.deps.pool.connection() as conn, conn.transaction():
        for plan_kind in ("seqscan", "bitmapscan", "sort"):  # a table this small is sorted
            await conn.execute(f"SET LOCAL enable_{plan_kind} = off")
        plan = await (await conn.execute(
            "EXPLAIN " + documents.retrieval.sql.search_ann,
            {"user": ME, "v": await app.deps.memory.embed_query("heron"), "k": 5})).fetchall()
    assert "document_chunks_embedding_hnsw" in " ".join(next(iter(r.values())) for r in plan)


async def test_a_failing_embedder_still_reads_the_document_and_says_it_was_not_kept(
    start, openai
):
    """The embedding endpoint fails (every retry): the turn still gets the document's text,
    the person is told it was not kept for later searches, and nothing half-stored remains."""
    app = await start()
    openai.embedding_failures = 10
    att = await app.deps.media.take(ME, "lease.pdf", long_pdf())
    assert att.kind == "document" and PHRASE in att.text
    assert "could not keep it for later searches" in att.notice
    assert "failed" in att.notice and "Traceback" not in att.notice
    assert "document_id" not in att.details
    assert await app.deps.media.documents.list(ME) == []
    openai.embedding_failures = 0
    kept = await app.deps.media.take(ME, "lease.pdf", long_pdf())
    assert kept.details["document_id"] and kept.notice == ""
