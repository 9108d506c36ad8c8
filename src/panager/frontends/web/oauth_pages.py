"""The small HTML pages of an OAuth link (Google, or any OAuth provider): the start page
and each callback outcome, in the provider's words.

They are plain strings (no template engine, no script) with their own strict
headers, so the callback works even where the web page's templates are not
served.
"""

from __future__ import annotations

import html

from aiohttp import web

from panager.services.accounts.oauth import STATE_TTL, LinkOutcome, OAuthLink

_MINUTES = int(STATE_TTL.total_seconds() // 60)
_AGAIN = "Send /connect {name} to Panager for a new link."

# reason -> (HTTP status, title, explanation)
PAGES: dict[str, tuple[int, str, str]] = {
    "linked": (
        200,
        "{title} account linked",
        "Panager can now use the {title} {scopes}{who} for @{owner}.",
    ),
    "blocked": (
        403,
        "Linking is not available",
        "This Panager account has no access, so nothing was stored.",
    ),
    "already_linked": (
        409,
        "This {title} account is already linked",
        "It is linked to another Panager user, and one {title} account can be linked to one "
        "user at a time. Nothing was stored. Disconnect it there first (/disconnect {name}).",
    ),
    "other_account": (
        409,
        "This is another {title} account",
        "{more} access must come from the {title} account already linked to Panager, so nothing "
        "was stored and your link is unchanged. Sign in to {title} with that account and use "
        "/connect {name} mail again (or /disconnect {name} first to switch accounts).",
    ),
    "missing_state": (
        400,
        "This link is not valid",
        "The address is missing its security code, so nothing was stored. " + _AGAIN,
    ),
    "forged": (
        400,
        "This link is not valid",
        "Its security code was not issued by Panager or was altered, so nothing was stored. "
        + _AGAIN,
    ),
    "expired": (
        400,
        "This link has expired",
        f"Links work for {_MINUTES} minutes. Nothing was stored. " + _AGAIN,
    ),
    "other_browser": (
        403,
        "This link is for another browser",
        "It was opened in a browser signed in to Panager as someone else, or continued in "
        "another browser than this one, so nothing was stored. Open the link in the browser "
        "you use Panager with. " + _AGAIN,
    ),
    "no_cookie": (
        403,
        "Continue from your link's page",
        "This browser did not come from the page your link opens, or it refuses cookies, so "
        "nothing was stored. Open the link from your chat again in this browser and press "
        "Continue there: Panager sets one cookie so it knows this browser when {title} sends "
        "it back.",
    ),
    "replayed": (
        400,
        "This link was already used",
        "Each link works once. Nothing was changed. " + _AGAIN,
    ),
    "denied": (
        200,
        "Access not granted",
        "You did not allow access, so nothing was stored. If you change your mind: "
        "/connect {name}.",
    ),
    "exchange_failed": (
        502,
        "{title} did not complete the sign-in",
        "{title} refused the sign-in code, so nothing was stored. " + _AGAIN,
    ),
    "no_scopes": (
        400,
        "No access was granted",
        "Every access was unticked, so nothing was stored. " + _AGAIN,
    ),
    "no_refresh_token": (
        400,
        "{title} did not grant lasting access",
        "Nothing was stored. Please sign in once more and confirm the consent screen.",
    ),
    "not_configured": (
        404,
        "{title} is not configured",
        "This Panager instance has no {title} OAuth client.",
    ),
    "error": (
        500,
        "Something went wrong",
        "Panager could not finish linking, and nothing was stored. " + _AGAIN,
    ),
}

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Panager</title>
<style>body{{font-family:system-ui,sans-serif;max-width:34rem;margin:4rem auto;padding:0 1rem;
line-height:1.5;color:#222}}h1{{font-size:1.4rem}}a.button{{display:inline-block;
padding:.5rem 1rem;background:#1a73e8;color:#fff;border-radius:.3rem;text-decoration:none}}
</style></head>
<body><h1>{icon} {title}</h1><p>{text}</p>{extra}</body></html>
"""
CONFIRM_TEXT = (
    "This link connects a {title} account to the Panager user @{owner} on {instance}. "
    "Continue only if you are @{owner}: whoever continues gives @{owner} access to "
    "the {access} of the {title} account they sign in with."
)
CONFIRM_FORM = (
    '<form method="post" action="{action}"><input type="hidden" name="state" value="{state}">'
    '<input type="hidden" name="browser" value="{browser}">'
    '<button class="button" type="submit">Continue to {title}</button></form>'
)
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' https: http:"
    ),
}


def render_page(
    reason: str,
    outcome: LinkOutcome | None = None,
    owner: str | None = None,
    link: OAuthLink | None = None,
    name: str = "google",
) -> web.Response:
    """The small HTML page for a callback outcome, in the words of `link` (or of the
    provider called `name` when none is configured)."""
    status, title, text = PAGES.get(reason, PAGES["error"])
    words = _words(link, name)
    title, text = title.format(**words), text.format(**words)
    extra = ""
    if outcome is not None and outcome.ok and link is not None:
        names = " and ".join(link.scope_names.get(s, s) for s in outcome.scopes)
        who = f" of {outcome.email}" if outcome.email else " account"
        text = text.format(scopes=names or "account", who=who, owner=owner or "you")
        if len(outcome.scopes) < len(link.scope_names):
            text += (" Only part of the access was allowed; /connect "
                     f"{link.name} again to add the rest.")
        text += " You can close this tab — your answer arrives in the chat."
    if outcome is not None and outcome.retry_link:
        url = html.escape(outcome.retry_link, quote=True)
        extra = f'<p><a class="button" href="{url}">Try again</a></p>'
    icon = "✅" if status == 200 and reason == "linked" else "⚠️"
    body = PAGE.format(title=html.escape(title), text=html.escape(text), icon=icon, extra=extra)
    return web.Response(
        text=body, status=status, content_type="text/html", headers=SECURITY_HEADERS
    )


def _words(link: OAuthLink | None, name: str) -> dict[str, str]:
    title = link.title if link is not None else name.capitalize()
    name = link.name if link is not None else name
    return {"title": title, "name": name, "more": "Gmail" if name == "google" else "Mail",
            # kept for the "linked" page, filled in by render_page
            "scopes": "{scopes}", "who": "{who}", "owner": "{owner}"}
