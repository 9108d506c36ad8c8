"""Speech to text through an OpenAI-compatible `/v1/audio/transcriptions` endpoint.

OpenAI, Groq, a local faster-whisper-server, LocalAI or whisper.cpp's server all
speak this API. The endpoint defaults to the chat endpoint (`OPENAI_BASE_URL`);
`PANAGER_TRANSCRIPTION_BASE_URL` points elsewhere, `PANAGER_TRANSCRIPTION_MODEL`
names the model (default `whisper-1`). No retries: a voice message the service
refuses gets one line and the rest of the message is still answered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import openai

log = logging.getLogger(__name__)
DEFAULT_MODEL = "whisper-1"


class TranscriptionFailed(Exception):
    """The service refused, failed or timed out; the message is one line for the person."""


@dataclass(frozen=True)
class TranscriptionConfig:
    """Where and how to transcribe."""

    base_url: str | None  # None: OpenAI's
    api_key: str | None
    model: str = DEFAULT_MODEL
    timeout: float = 60.0


class Transcriber:
    """One client for the person's voice messages and audio files."""

    def __init__(self, config: TranscriptionConfig) -> None:
        self.config = config
        self._client: openai.AsyncOpenAI | None = None

    @property
    def configured(self) -> bool:
        """Whether an endpoint can be reached: a key, or a custom (local) server."""
        return bool(self.config.api_key or self.config.base_url)

    def _openai(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                api_key=self.config.api_key or "unused",
                base_url=self.config.base_url,
                timeout=self.config.timeout,
                max_retries=0,
            )
        return self._client

    async def transcribe(self, name: str, data: bytes, mime: str) -> str:
        """The words heard in the audio; TranscriptionFailed with one line otherwise."""
        if not self.configured:
            raise TranscriptionFailed(
                "no transcription service is set up (OPENAI_API_KEY or "
                "PANAGER_TRANSCRIPTION_BASE_URL)"
            )
        try:
            result = await self._openai().audio.transcriptions.create(
                model=self.config.model, file=(name, data, mime)
            )
        except openai.APITimeoutError:
            raise TranscriptionFailed("the transcription service did not answer in time") from None
        except openai.APIStatusError as exc:
            log.warning("transcription refused: %s", exc.status_code)
            raise TranscriptionFailed(
                f"the transcription service refused it (HTTP {exc.status_code})"
            ) from None
        except openai.APIError as exc:
            log.warning("transcription failed: %s", type(exc).__name__)
            raise TranscriptionFailed("the transcription service could not be reached") from None
        text = getattr(result, "text", None) or ""
        if not text.strip():
            raise TranscriptionFailed("no speech was heard in it")
        return text.strip()
