"""Errors with a meaning for the agent loop."""

from __future__ import annotations


class ToolError(Exception):
    """A tool's own, expected failure: the message is shown to the model as an error result.

    Say what was wrong and what is valid, e.g. "Unknown schedule id 'x'; use
    schedule_list to see ids".
    """


class AuthRequired(Exception):
    """A tool needs the user to link an account first; the turn ends with `link`."""

    def __init__(self, provider: str, link: str, message: str | None = None) -> None:
        super().__init__(message or f"{provider} is not linked")
        self.provider = provider
        self.link = link
        self.message = message or f"To do that I need access to your {provider} account."
        self.scopes: tuple[str, ...] = ()  # what the link must ask for (empty: the default)


class ModelUnavailable(Exception):
    """The model API failed after retries; `user_message` is safe to show."""

    def __init__(self, user_message: str) -> None:
        super().__init__(user_message)
        self.user_message = user_message


class ContextOverflow(Exception):
    """The model API refused the request as too long for its context window."""


class UserBusy(Exception):
    """The user's turn lock is held elsewhere and the caller asked not to wait."""
