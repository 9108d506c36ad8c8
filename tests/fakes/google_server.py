"""Local fake of Google's OAuth 2 server, Calendar v3 and Tasks v1 for end-to-end tests.

The fake is driven by the *real* clients (google-auth-oauthlib, google-auth,
google-api-python-client).  ``async with`` serves on the running event loop: call the
synchronous Google clients through ``asyncio.to_thread`` (calling them on the loop thread
would block the loop that serves them).  Plain ``with`` serves from a background thread,
for synchronous test code::

    async with FakeGoogle() as fake:
        flow = Flow.from_client_config(fake.client_config(redirect), scopes=[...],
                                       redirect_uri=redirect)
        url, state = flow.authorization_url(access_type="offline", prompt="consent")
        flow.fetch_token(authorization_response=await fake.authorize(url))
        service = build("calendar", "v3", credentials=flow.credentials,
                        static_discovery=True, cache_discovery=False,
                        client_options={"api_endpoint": fake.calendar_endpoint})

OAuth: ``GET /o/oauth2/auth`` (auto-consent, see :meth:`FakeGoogle.authorize`),
``POST /token`` (``authorization_code`` with PKCE S256, ``refresh_token``),
``POST /revoke``.  API calls need ``Authorization: Bearer <access token>`` and the right
scope; every account sees only its own data.

Behaviour kept from Google on purpose (production code must cope with it):

* the primary calendar is listed under the account's e-mail; ``primary`` is an alias.
  The default task list has an opaque id; ``@default`` is an alias.
* refresh tokens are returned only with ``access_type=offline`` and only on the first
  consent of an account unless ``prompt=consent``.
* ``email``/``profile`` scopes come back as ``userinfo.*`` URLs (oauthlib then warns
  "Scope has changed" unless ``OAUTHLIB_RELAX_TOKEN_SCOPE=1``).
* recurring timed events need ``start.timeZone``; ``timeMin``/``timeMax`` need an offset;
  ``orderBy=startTime`` needs ``singleEvents=true``; client-chosen event ids must be
  base32hex (``[a-v0-9]{5,1024}``); deleting twice answers 410; ``get`` returns deleted
  events with ``status: cancelled``; a write with ``If-Match`` naming an older etag
  answers 412.
* a task's ``due`` keeps only the date; task lists omit ``items`` when empty; a deleted
  task stays readable by ``get`` with ``deleted: true``.
* result pages are small (:attr:`FakeGoogle.page_size`, 5 by default) so pagination runs.

Simplifications: no sync tokens, attendees, reminders logic, ACLs or batch requests;
without ``timeMax`` a recurring event expands at most 1000 instances / 5 years ahead;
event text search (``q``) matches summary, description and location only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import hashlib
import itertools
import json
import re
import secrets
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aiohttp import web
from dateutil import rrule

from tests.fakes.gmail_fake import GMAIL_SCOPES, _GmailMixin, gmail_needed_scopes

__all__ = [
    "CALENDAR_SCOPE",
    "TASKS_SCOPE",
    "AuthorizationRejected",
    "FakeGoogle",
    "GoogleApiError",
]

_AUTH = "https://www.googleapis.com/auth/"
CALENDAR_SCOPE = _AUTH + "calendar"
TASKS_SCOPE = _AUTH + "tasks"
_SCOPE_ALIASES = {"email": _AUTH + "userinfo.email", "profile": _AUTH + "userinfo.profile"}
_CAL_READ = {CALENDAR_SCOPE, CALENDAR_SCOPE + ".readonly"}
_EVENTS_WRITE = {CALENDAR_SCOPE, CALENDAR_SCOPE + ".events"}
_EVENTS_READ = _CAL_READ | _EVENTS_WRITE | {CALENDAR_SCOPE + ".events.readonly"}
_TASKS_READ = {TASKS_SCOPE, TASKS_SCOPE + ".readonly"}
_KNOWN_SCOPES = (
    _EVENTS_READ
    | _TASKS_READ
    | GMAIL_SCOPES
    | set(_SCOPE_ALIASES)
    | set(_SCOPE_ALIASES.values())
    | {"openid"}
)

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
}
_UNAUTHENTICATED = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential. See "
    "https://developers.google.com/identity/sign-in/web/devconsole-project."
)
_EVENT_ID = re.compile(r"^[a-v0-9]{5,1024}$")
_INSTANCE_ID = re.compile(r"^(?P<master>.+)_(?P<stamp>\d{8}(?:T\d{6}Z)?)$")
_UNTIL = re.compile(r"UNTIL=([0-9TZ]+)")
_EVENT_SERVER_FIELDS = (
    "kind",
    "etag",
    "id",
    "htmlLink",
    "created",
    "updated",
    "creator",
    "organizer",
    "iCalUID",
    "recurringEventId",
    "originalStartTime",
    "sequence",
)
_TASK_SERVER_FIELDS = ("kind", "etag", "id", "selfLink", "updated", "position", "webViewLink")
_API_PREFIXES = ("/calendar/", "/tasks/", "/gmail/", "/oauth2/v3/")
_RequestKey = getattr(web, "RequestKey", None)  # aiohttp >= 3.13 warns about plain str keys
_ACCOUNT: Any = _RequestKey("fake_google_account", str) if _RequestKey else "fake_google_account"
_BODY: Any = _RequestKey("fake_google_body", object) if _RequestKey else "fake_google_body"
_MAX_INSTANCES = 1000
_HORIZON = timedelta(days=5 * 366)  # open-ended expansion without timeMax


class GoogleApiError(Exception):
    """An API error rendered as Google's JSON error body."""

    def __init__(self, code: int, reason: str, message: str, **extra: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.extra = code, reason, message, extra

    def response(self) -> web.Response:
        """The aiohttp response Google would send."""
        item = {"domain": "global", "reason": self.reason, "message": self.message}
        item.update(self.extra)
        body: dict[str, Any] = {"code": self.code, "message": self.message, "errors": [item]}
        if self.code in _STATUS:
            body["status"] = _STATUS[self.code]
        headers = {}
        if self.code == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="https://accounts.google.com/"'
        return _json({"error": body}, self.code, headers)


class OAuthError(Exception):
    """A token-endpoint error (``{"error": ..., "error_description": ...}``)."""

    def __init__(self, code: int, error: str, description: str) -> None:
        super().__init__(f"{error}: {description}")
        self.code, self.error, self.description = code, error, description

    def response(self) -> web.Response:
        """The aiohttp response Google's token endpoint would send."""
        return _json({"error": self.error, "error_description": self.description}, self.code)


class AuthorizationRejected(ValueError):
    """The authorization URL our app built would be refused by Google's consent screen."""


def _bad(message: str, reason: str = "invalid") -> GoogleApiError:
    return GoogleApiError(400, reason, message)


def _not_found() -> GoogleApiError:
    return GoogleApiError(404, "notFound", "Not Found")


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        text=json.dumps(data),
        status=status,
        headers=headers,
        content_type="application/json",
        charset="UTF-8",
    )


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _digest(text: str, size: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


# ---------------------------------------------------------------------------- time


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(dt: datetime | None = None) -> str:
    """RFC 3339 UTC with milliseconds, as Google writes ``updated``/``created``."""
    dt = (dt or _now()).astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _render(dt: datetime, zone: ZoneInfo) -> str:
    return dt.astimezone(zone).isoformat(timespec="seconds").replace("+00:00", "Z")


def _parse_rfc3339(value: str | None, what: str) -> datetime | None:
    """Parse a timestamp that must carry an offset (``None`` passes through)."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None or "T" not in value.upper():
        raise _bad(f"Invalid value for: {what}: {value!r} is not a valid RFC 3339 timestamp")
    return parsed


def _zone(name: str | None, which: str) -> ZoneInfo | None:
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise _bad(f"Invalid time zone definition for {which} time.") from exc


def _normalize_time(value: Any, which: str, cal_zone: ZoneInfo) -> dict:
    """Validate an event ``start``/``end`` and render it the way Google returns it."""
    if not isinstance(value, dict) or not (value.get("date") or value.get("dateTime")):
        raise _bad(f"Missing {which} time.", "required")
    if value.get("date") and value.get("dateTime"):
        raise _bad(f"Invalid {which} time.")
    if value.get("date"):
        try:
            return {"date": date.fromisoformat(value["date"]).isoformat()}
        except (TypeError, ValueError) as exc:
            raise _bad(f"Invalid {which} time.") from exc
    return _normalize_datetime(value, which, cal_zone)


def _normalize_datetime(value: dict, which: str, cal_zone: ZoneInfo) -> dict:
    zone = _zone(value.get("timeZone"), which)
    try:
        parsed = datetime.fromisoformat(value["dateTime"])
    except (TypeError, ValueError) as exc:
        raise _bad(f"Invalid {which} time.") from exc
    if parsed.tzinfo is None:
        if zone is None:
            raise _bad(f"Missing time zone definition for {which} time.", "required")
        parsed = parsed.replace(tzinfo=zone)
    out = {"dateTime": _render(parsed, zone or cal_zone)}
    if zone is not None:
        out["timeZone"] = value["timeZone"]
    return out


def _moment(value: dict, cal_zone: ZoneInfo) -> datetime:
    """The instant of a normalized event time (an all-day date starts at local midnight)."""
    if "date" in value:
        return datetime.combine(date.fromisoformat(value["date"]), dtime(), cal_zone)
    return datetime.fromisoformat(value["dateTime"])


def _bounds(event: dict, cal_zone: ZoneInfo) -> tuple[datetime, datetime]:
    return _moment(event["start"], cal_zone), _moment(event["end"], cal_zone)


def _overlaps(event: dict, cal_zone: ZoneInfo, lo: datetime | None, hi: datetime | None) -> bool:
    """Google's filter: ``timeMin`` bounds the end, ``timeMax`` the start (both exclusive)."""
    start, end = _bounds(event, cal_zone)
    return (lo is None or end > lo) and (hi is None or start < hi)


# ---------------------------------------------------------------------- recurrence


def _series_start(event: dict) -> datetime:
    """DTSTART for dateutil: naive midnight for all-day, wall clock in the event zone else."""
    start = event["start"]
    if "date" in start:
        return datetime.combine(date.fromisoformat(start["date"]), dtime())
    return datetime.fromisoformat(start["dateTime"]).astimezone(ZoneInfo(start["timeZone"]))


def _fix_until(line: str, dtstart: datetime) -> str:
    """Make UNTIL's type match DTSTART's, as Google tolerates (dateutil would raise)."""
    match = _UNTIL.search(line) if line.upper().startswith("RRULE") else None
    if match is None or (dtstart.tzinfo is not None and match.group(1).endswith("Z")):
        return line
    fixed = _until_value(match.group(1), dtstart)
    return line[: match.start(1)] + fixed + line[match.end(1) :]


def _until_value(raw: str, dtstart: datetime) -> str:
    if dtstart.tzinfo is None:
        return raw.rstrip("Z")
    if "T" in raw:
        local = datetime.strptime(raw, "%Y%m%dT%H%M%S")
    else:  # a bare date: the whole day, in the event's zone
        local = datetime.strptime(raw, "%Y%m%d").replace(hour=23, minute=59, second=59)
    return local.replace(tzinfo=dtstart.tzinfo).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _rule_set(event: dict) -> rrule.rruleset:
    dtstart = _series_start(event)
    lines = [_fix_until(line, dtstart) for line in event["recurrence"]]
    return rrule.rrulestr("\n".join(lines), dtstart=dtstart, forceset=True)


def _check_recurrence(event: dict) -> None:
    rules = event.get("recurrence")
    if not rules:
        return
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise _bad("Invalid recurrence rule.")
    if "dateTime" in event["start"] and not event["start"].get("timeZone"):
        raise _bad("Missing time zone definition for start time.", "required")
    try:
        list(itertools.islice(_rule_set(event), 3))
    except (ValueError, TypeError, KeyError) as exc:
        raise _bad("Invalid recurrence rule.") from exc


def _local_query(moment: datetime, dtstart: datetime, cal_zone: ZoneInfo) -> datetime:
    """Express a query bound in the same (naive or aware) terms as the rule's DTSTART."""
    if dtstart.tzinfo is None:
        return moment.astimezone(cal_zone).replace(tzinfo=None)
    return moment


def _occurrences(
    event: dict, cal_zone: ZoneInfo, lo: datetime | None, hi: datetime | None
) -> Iterator[datetime]:
    """Starts (in DTSTART's terms) of the instances overlapping ``[lo, hi)``."""
    start, end = _bounds(event, cal_zone)
    dtstart = _series_start(event)
    lo = lo or start - timedelta(seconds=1)
    hi = hi or max(lo, start) + _HORIZON
    after = _local_query(lo - (end - start), dtstart, cal_zone)
    before = _local_query(hi, dtstart, cal_zone)
    for occurrence in _rule_set(event).xafter(after, count=_MAX_INSTANCES):
        if occurrence >= before:
            return
        yield occurrence


def _instance_suffix(occurrence: datetime) -> str:
    if occurrence.tzinfo is None:
        return occurrence.strftime("%Y%m%d")
    return occurrence.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _instance(master: dict, occurrence: datetime, cal_zone: ZoneInfo) -> dict:
    """One expanded instance of a recurring event, shaped like Google's."""
    start, end = _bounds(master, cal_zone)
    inst = copy.deepcopy(master)
    inst.pop("recurrence", None)
    if occurrence.tzinfo is None:
        first = {"date": occurrence.date().isoformat()}
        last = {"date": (occurrence + (end - start)).date().isoformat()}
    else:
        first = {**master["start"], "dateTime": _render(occurrence, occurrence.tzinfo)}
        ends = occurrence + (end - start)
        last = {**master["end"], "dateTime": _render(ends, _zone_of(master["end"], cal_zone))}
    inst.update(
        id=f"{master['id']}_{_instance_suffix(occurrence)}",
        recurringEventId=master["id"],
        originalStartTime=dict(first),
        start=first,
        end=last,
    )
    return inst


def _zone_of(value: dict, cal_zone: ZoneInfo) -> ZoneInfo:
    return ZoneInfo(value["timeZone"]) if value.get("timeZone") else cal_zone


def _parse_instance_stamp(stamp: str) -> datetime:
    if "T" in stamp:
        return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return datetime.strptime(stamp, "%Y%m%d")


# ------------------------------------------------------------------------- helpers


def _flag(query: Any, name: str, default: bool) -> bool:
    value = query.get(name)
    return default if value is None else value.lower() == "true"


def _paginate(items: list, query: Any, default: int, cap: int) -> tuple[list, str | None]:
    """Slice one page; the page token is an opaque encoded offset."""
    try:
        size = min(int(query.get("maxResults") or default), cap)
        token = query.get("pageToken")
        offset = int(base64.urlsafe_b64decode(token + "==").decode()[1:]) if token else 0
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad("Invalid pageToken or maxResults.") from exc
    if size < 1:
        raise _bad("Invalid value for: maxResults")
    end = offset + size
    more = end < len(items)
    return items[offset:end], _b64(f"p{end}".encode()) if more else None


def _merge(target: dict, patch: dict) -> None:
    """JSON patch semantics of Google APIs: objects merge, ``null`` clears, rest replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _strip(body: dict, names: Iterable[str]) -> dict:
    return {k: v for k, v in body.items() if k not in names}


def _text_match(event: dict, words: str | None) -> bool:
    if not words:
        return True
    hay = " ".join(str(event.get(k, "")) for k in ("summary", "description", "location"))
    return all(word in hay.lower() for word in words.lower().split())


def _s256(verifier: str) -> str:
    return _b64(hashlib.sha256(verifier.encode()).digest())


def _basic_credentials(header: str) -> tuple[str, str] | None:
    if not header.lower().startswith("basic "):
        return None
    try:
        raw = base64.b64decode(header[6:].strip()).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    user, _, password = raw.partition(":")
    return unquote(user), unquote(password)


def _query_dict(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


def _with_query(url: str, params: dict[str, str]) -> str:
    return f"{url}{'&' if '?' in url else '?'}{urlencode(params)}"


# ---------------------------------------------------------------------- oauth state


@dataclass
class _Grant:
    """One consent: an account's scopes for a client; revoking it kills all its tokens."""

    account: str
    client_id: str
    scopes: tuple[str, ...]
    revoked: bool = False


@dataclass
class _Code:
    grant: _Grant
    redirect_uri: str
    challenge: str
    offline: bool
    nonce: str | None
    expires_at: float = field(default_factory=lambda: time.time() + 600)
    used: bool = False


@dataclass
class _Access:
    grant: _Grant
    expires_at: float


class _OAuthMixin:
    """Authorization, token and revocation endpoints plus bearer-token checks."""

    def client_config(self, redirect_uri: str | None = None) -> dict:
        """A ``{"web": {...}}`` client-secrets dict for ``Flow.from_client_config``."""
        web_config = {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "auth_uri": self.auth_uri,
            "token_uri": self.token_uri,
            "revoke_uri": self.revoke_uri,
        }
        if redirect_uri:
            web_config["redirect_uris"] = [redirect_uri]
        return {"web": web_config}

    async def authorize(
        self,
        auth_url: str,
        *,
        account: str = "alice@example.com",
        grant_refresh_token: bool = True,
        granted_scopes: Sequence[str] | None = None,
        deny: bool = False,
    ) -> str:
        """Play the user clicking "Allow" on the consent screen for ``auth_url``.

        Checks the URL our app built (endpoint, ``response_type=code``, client id,
        redirect URI, known scopes, ``state``, PKCE ``S256`` challenge,
        ``access_type=offline``) and raises :class:`AuthorizationRejected` listing every
        problem.  Returns the URL the browser is sent back to:
        ``redirect_uri?state=...&code=...&scope=...`` (``error=access_denied`` when
        ``deny``).  ``granted_scopes`` simulates the user unticking scopes.
        """
        return self.authorize_sync(
            auth_url,
            account=account,
            grant_refresh_token=grant_refresh_token,
            granted_scopes=granted_scopes,
            deny=deny,
        )

    def authorize_sync(
        self,
        auth_url: str,
        *,
        account: str = "alice@example.com",
        grant_refresh_token: bool = True,
        granted_scopes: Sequence[str] | None = None,
        deny: bool = False,
    ) -> str:
        """Synchronous :meth:`authorize` (for code running outside the server's loop)."""
        params = self._check_authorization(auth_url)
        back = {"state": params["state"]}
        if deny:
            return _with_query(params["redirect_uri"], {**back, "error": "access_denied"})
        with self._lock:
            code, scopes = self._issue_code(params, account, grant_refresh_token, granted_scopes)
        back.update(code=code, scope=" ".join(scopes), authuser="0", prompt="consent")
        return _with_query(params["redirect_uri"], back)

    def _check_authorization(self, auth_url: str) -> dict[str, str]:
        parts = urlsplit(auth_url)
        params = _query_dict(auth_url)
        problems = list(self._authorization_problems(params))
        if f"{parts.scheme}://{parts.netloc}{parts.path}" != self.auth_uri:
            problems.insert(0, f"authorization endpoint is not {self.auth_uri}")
        if problems:
            raise AuthorizationRejected("; ".join(problems))
        return params

    def _authorization_problems(self, params: dict[str, str]) -> Iterator[str]:
        if params.get("response_type") != "code":
            yield "unsupported_response_type: response_type must be 'code'"
        if params.get("client_id") != self.client_id:
            yield f"invalid_client: unknown client_id {params.get('client_id')!r}"
        redirect = params.get("redirect_uri")
        if not redirect or (self.redirect_uris and redirect not in self.redirect_uris):
            yield f"redirect_uri_mismatch: {redirect!r} is not registered"
        scopes = params.get("scope", "").split()
        unknown = [s for s in scopes if s not in _KNOWN_SCOPES]
        if not scopes or unknown:
            yield f"invalid_scope: {unknown or 'no scope requested'}"
        if not params.get("state"):
            yield "missing state parameter"
        if params.get("code_challenge_method") != "S256" or not params.get("code_challenge"):
            yield "PKCE required: code_challenge with code_challenge_method=S256"
        if params.get("access_type") != "offline":
            yield "access_type=offline is required for a refresh token"

    def _issue_code(
        self, params: dict, account: str, refresh: bool, granted: Sequence[str] | None
    ) -> tuple[str, tuple[str, ...]]:
        self.ensure_account(account)
        scopes = [_SCOPE_ALIASES.get(s, s) for s in params["scope"].split()]
        if granted is not None:
            allowed = {_SCOPE_ALIASES.get(s, s) for s in granted}
            scopes = [s for s in scopes if s in allowed or s == "openid"]
        key = (account, self.client_id)
        if params.get("include_granted_scopes") == "true":
            scopes += [s for s in self._consented.get(key, ()) if s not in scopes]
        first = key not in self._consented
        self._consented[key] = tuple(scopes)
        offline = refresh and (first or "consent" in params.get("prompt", "").split())
        grant = _Grant(account, self.client_id, tuple(scopes))
        code = "4/0A" + secrets.token_urlsafe(24)
        self._codes[code] = _Code(
            grant, params["redirect_uri"], params["code_challenge"], offline, params.get("nonce")
        )
        return code, grant.scopes

    async def _auth_page(self, request: web.Request) -> web.Response:
        """``GET /o/oauth2/auth``: auto-consent (``login_hint`` or the default account)."""
        account = request.query.get("login_hint") or self.default_account
        try:
            location = self.authorize_sync(str(request.url), account=account)
        except AuthorizationRejected as exc:
            return web.Response(status=400, text=f"Error 400: {exc}")
        raise web.HTTPFound(location)

    async def _token(self, request: web.Request) -> web.Response:
        """``POST /token``: authorization_code and refresh_token grants."""
        form = {k: str(v) for k, v in (await request.post()).items()}
        auth = request.headers.get("Authorization", "")
        self.token_requests.append({**form, "authorization": auth or None})
        with self._lock:
            client_id = self._client_of(form, auth)
            grant_type = form.get("grant_type")
            if grant_type == "authorization_code":
                payload = self._exchange_code(form, client_id)
            elif grant_type == "refresh_token":
                payload = self._refresh(form, client_id)
            else:
                raise OAuthError(400, "unsupported_grant_type", f"Invalid grant_type: {grant_type}")
        return _json(payload, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})

    def _client_of(self, form: dict[str, str], auth: str) -> str:
        basic = _basic_credentials(auth)
        client_id, secret = basic or (form.get("client_id"), form.get("client_secret"))
        if client_id != self.client_id or secret != self.client_secret:
            raise OAuthError(401, "invalid_client", "Unauthorized")
        return client_id

    def _exchange_code(self, form: dict[str, str], client_id: str) -> dict:
        code = self._codes.get(form.get("code", ""))
        if code is None or code.used or code.expires_at < time.time():
            raise OAuthError(400, "invalid_grant", "Malformed auth code.")
        if code.grant.client_id != client_id:
            raise OAuthError(400, "invalid_grant", "Bad Request")
        if form.get("redirect_uri") != code.redirect_uri:
            raise OAuthError(400, "redirect_uri_mismatch", "Bad Request")
        verifier = form.get("code_verifier")
        if not verifier:
            raise OAuthError(400, "invalid_grant", "Missing code verifier.")
        if _s256(verifier) != code.challenge:
            raise OAuthError(400, "invalid_grant", "Invalid code verifier.")
        code.used = True
        return self._token_payload(code.grant, refresh=code.offline, nonce=code.nonce)

    def _refresh(self, form: dict[str, str], client_id: str) -> dict:
        grant = self._refresh_tokens.get(form.get("refresh_token", ""))
        if grant is None or grant.revoked:
            raise OAuthError(400, "invalid_grant", "Token has been expired or revoked.")
        if grant.client_id != client_id:
            raise OAuthError(401, "unauthorized_client", "Unauthorized")
        wanted = form.get("scope", "").split()
        if any(_SCOPE_ALIASES.get(s, s) not in grant.scopes for s in wanted):
            raise OAuthError(400, "invalid_scope", "Bad Request")
        return self._token_payload(grant, refresh=False, nonce=None)

    def _token_payload(self, grant: _Grant, *, refresh: bool, nonce: str | None) -> dict:
        token = "ya29.fake-" + secrets.token_urlsafe(24)
        self._access[token] = _Access(grant, time.time() + self.access_token_lifetime)
        payload = {
            "access_token": token,
            "expires_in": self.access_token_lifetime,
            "scope": " ".join(grant.scopes),
            "token_type": "Bearer",
        }
        if refresh:
            payload["refresh_token"] = "1//fake-" + secrets.token_urlsafe(24)
            self._refresh_tokens[payload["refresh_token"]] = grant
        if "openid" in grant.scopes:
            payload["id_token"] = self._id_token(grant, nonce)
        return payload

    def _id_token(self, grant: _Grant, nonce: str | None) -> str:
        """An unsigned-looking JWT (signature is fake; nobody verifies it offline)."""
        now = int(time.time())
        claims = {
            "iss": "https://accounts.google.com",
            "aud": grant.client_id,
            "sub": _digest(grant.account, 21),
            "email": grant.account,
            "email_verified": True,
            "iat": now,
            "exp": now + 3600,
        }
        if nonce:
            claims["nonce"] = nonce
        header = {"alg": "RS256", "kid": "fake", "typ": "JWT"}
        parts = [_b64(json.dumps(p).encode()) for p in (header, claims)]
        return ".".join([*parts, _b64(b"fake-signature")])

    async def _revoke(self, request: web.Request) -> web.Response:
        """``POST /revoke?token=``: revokes the whole grant behind an access/refresh token."""
        form = await request.post()
        token = str(form.get("token") or request.query.get("token") or "")
        self.token_requests.append({"revoke": token})
        with self._lock:
            access = self._access.get(token)
            grant = access.grant if access else self._refresh_tokens.get(token)
            if grant is None or grant.revoked:
                raise OAuthError(400, "invalid_token", "Token expired or revoked")
            grant.revoked = True
        return _json({})

    def issue_tokens(self, account: str, scopes: Sequence[str] | None = None) -> dict:
        """Mint an access + refresh token directly, skipping the consent flow."""
        with self._lock:
            self.ensure_account(account)
            grant = _Grant(account, self.client_id, tuple(scopes or (CALENDAR_SCOPE, TASKS_SCOPE)))
            return self._token_payload(grant, refresh=True, nonce=None)

    def expire_access_tokens(self) -> None:
        """Every access token issued so far now answers 401 (forces a refresh)."""
        with self._lock:
            for access in self._access.values():
                access.expires_at = 0.0

    def revoke_account(self, account: str) -> None:
        """Revoke every grant of ``account``: refreshes fail with ``invalid_grant``."""
        with self._lock:
            grants = {id(g): g for g in self._refresh_tokens.values()}
            grants.update({id(a.grant): a.grant for a in self._access.values()})
            for grant in grants.values():
                if grant.account == account:
                    grant.revoked = True
            self._consented = {k: v for k, v in self._consented.items() if k[0] != account}

    def _bearer_grant(self, header: str) -> _Grant:
        if not header.lower().startswith("bearer "):
            raise GoogleApiError(
                401,
                "required",
                "Login Required.",
                location="Authorization",
                locationType="header",
            )
        access = self._access.get(header[7:].strip())
        if access is None or access.expires_at <= time.time() or access.grant.revoked:
            raise GoogleApiError(
                401,
                "authError",
                _UNAUTHENTICATED,
                location="Authorization",
                locationType="header",
            )
        return access.grant


# ------------------------------------------------------------------------ calendar


class _CalendarMixin:
    """Calendar v3: calendarList and events (list/insert/get/patch/update/delete/instances)."""

    def _calendar(self, account: str, calendar_id: str) -> dict:
        mine = self.calendars[account]
        key = "primary" if calendar_id == account else calendar_id
        if key not in mine:
            raise _not_found()
        return mine[key]

    def _cal_zone(self, cal: dict) -> ZoneInfo:
        return ZoneInfo(cal["timeZone"])

    def _calendar_entry(self, account: str, cal: dict) -> dict:
        entry = {
            "kind": "calendar#calendarListEntry",
            "etag": cal["etag"],
            "id": cal["id"],
            "summary": cal["summary"],
            "timeZone": cal["timeZone"],
            "colorId": cal["colorId"],
            "backgroundColor": "#9fe1e7",
            "foregroundColor": "#000000",
            "selected": True,
            "accessRole": "owner",
            "defaultReminders": [],
        }
        if cal["id"] == account:
            entry["primary"] = True
        return entry

    async def _calendar_list(self, request: web.Request) -> web.Response:
        account = request[_ACCOUNT]
        items = [self._calendar_entry(account, c) for c in self.calendars[account].values()]
        page, token = _paginate(items, request.query, self.page_size, 250)
        body: dict[str, Any] = {"kind": "calendar#calendarList", "etag": self._etag()}
        if token:
            body["nextPageToken"] = token
        return _json({**body, "items": page})

    async def _calendar_list_get(self, request: web.Request) -> web.Response:
        account = request[_ACCOUNT]
        cal = self._calendar(account, request.match_info["calendarId"])
        return _json(self._calendar_entry(account, cal))

    def _new_event(self, account: str, cal: dict, body: dict, event_id: str) -> dict:
        now = _stamp()
        event = {
            "kind": "calendar#event",
            "etag": self._etag(),
            "id": event_id,
            "status": "confirmed",
            "htmlLink": "https://www.google.com/calendar/event?eid="
            + _b64(f"{event_id} {cal['id']}".encode()),
            "created": now,
            "updated": now,
            "creator": {"email": account, "self": True},
            "organizer": {"email": cal["id"], "displayName": cal["summary"], "self": True},
            "iCalUID": f"{event_id}@google.com",
            "sequence": 0,
            "reminders": {"useDefault": True},
            "eventType": "default",
        }
        event.update(_strip(body, _EVENT_SERVER_FIELDS))
        return self._validated(event, cal)

    def _validated(self, event: dict, cal: dict) -> dict:
        zone = self._cal_zone(cal)
        event["start"] = _normalize_time(event.get("start"), "start", zone)
        event["end"] = _normalize_time(event.get("end"), "end", zone)
        start, end = _bounds(event, zone)
        if end < start or ("date" in event["start"]) != ("date" in event["end"]):
            raise _bad("The specified time range is empty.", "timeRangeEmpty")
        if event.get("status") not in ("confirmed", "tentative", "cancelled"):
            raise _bad("Invalid value for: status")
        _check_recurrence(event)
        return event

    def _touch(self, event: dict, before: dict) -> dict:
        event["etag"] = self._etag()
        event["updated"] = _stamp()
        if (before.get("start"), before.get("end")) != (event["start"], event["end"]):
            event["sequence"] = before.get("sequence", 0) + 1
        return event

    async def _events_insert(self, request: web.Request) -> web.Response:
        account, body = request[_ACCOUNT], request[_BODY] or {}
        cal = self._calendar(account, request.match_info["calendarId"])
        event_id = body.get("id") or self._new_event_id()
        if not isinstance(event_id, str) or not _EVENT_ID.match(event_id):
            raise _bad("Invalid resource id value.")
        if event_id in cal["events"]:
            raise GoogleApiError(409, "duplicate", "The requested identifier already exists.")
        event = self._new_event(account, cal, body, event_id)
        cal["events"][event_id] = event
        return _json(event)

    def _new_event_id(self) -> str:
        alphabet = "0123456789abcdefghijklmnopqrstuv"
        return "".join(secrets.choice(alphabet) for _ in range(26))

    def _find_instance(self, cal: dict, event_id: str) -> dict | None:
        """Synthesize instance ``{master}_{stamp}`` of a recurring event, if it exists."""
        match = _INSTANCE_ID.match(event_id)
        master = cal["events"].get(match["master"]) if match else None
        if master is None or not master.get("recurrence") or master["status"] == "cancelled":
            return None
        wanted = _parse_instance_stamp(match["stamp"])
        if (wanted.tzinfo is None) != ("date" in master["start"]):
            return None
        found = _rule_set(master).after(wanted, inc=True)
        if found is None or found != wanted:
            return None
        return _instance(master, found, self._cal_zone(cal))

    def _existing_event(self, cal: dict, event_id: str) -> dict:
        event = cal["events"].get(event_id) or self._find_instance(cal, event_id)
        if event is None:
            raise _not_found()
        return event

    async def _events_get(self, request: web.Request) -> web.Response:
        cal = self._calendar(request[_ACCOUNT], request.match_info["calendarId"])
        return _json(self._existing_event(cal, request.match_info["eventId"]))

    async def _events_patch(self, request: web.Request) -> web.Response:
        return self._events_write(request, replace=False)

    async def _events_update(self, request: web.Request) -> web.Response:
        return self._events_write(request, replace=True)

    def _events_write(self, request: web.Request, *, replace: bool) -> web.Response:
        cal = self._calendar(request[_ACCOUNT], request.match_info["calendarId"])
        before = self._existing_event(cal, request.match_info["eventId"])
        _check_match(request, before)
        body = _strip(request[_BODY] or {}, _EVENT_SERVER_FIELDS)
        if replace:
            event = {k: copy.deepcopy(v) for k, v in before.items() if k in _EVENT_SERVER_FIELDS}
            event.update({"status": "confirmed", "eventType": "default"})
            event.update(copy.deepcopy(body))
        else:
            event = copy.deepcopy(before)
            _merge(event, body)
        event = self._touch(self._validated(event, cal), before)
        cal["events"][event["id"]] = event
        return _json(event)

    async def _events_delete(self, request: web.Request) -> web.Response:
        cal = self._calendar(request[_ACCOUNT], request.match_info["calendarId"])
        event = self._existing_event(cal, request.match_info["eventId"])
        if event["status"] == "cancelled":
            raise GoogleApiError(410, "deleted", "Resource has been deleted")
        _check_match(request, event)
        cal["events"].setdefault(event["id"], event)
        for other in cal["events"].values():
            if event["id"] in (other["id"], other.get("recurringEventId")):
                self._cancel(other)
        return web.Response(status=204)

    def _cancel(self, event: dict) -> dict:
        event.update(status="cancelled", etag=self._etag(), updated=_stamp())
        return event

    async def _events_list(self, request: web.Request) -> web.Response:
        cal = self._calendar(request[_ACCOUNT], request.match_info["calendarId"])
        query, zone = request.query, self._cal_zone(cal)
        lo = _parse_rfc3339(query.get("timeMin"), "timeMin")
        hi = _parse_rfc3339(query.get("timeMax"), "timeMax")
        single = _flag(query, "singleEvents", False)
        if query.get("orderBy") == "startTime" and not single:
            raise _bad("The requested ordering is not available for the particular query.")
        items = self._expanded(cal, lo, hi) if single else self._series(cal, lo, hi)
        show_deleted = _flag(query, "showDeleted", False)
        items = [
            e
            for e in items
            if (show_deleted or e["status"] != "cancelled") and _text_match(e, query.get("q"))
        ]
        if query.get("orderBy") == "startTime":
            items.sort(key=lambda e: _bounds(e, zone)[0])
        elif query.get("orderBy") == "updated":
            items.sort(key=lambda e: e["updated"])
        return self._events_page(cal, items, query)

    def _events_page(self, cal: dict, items: list[dict], query: Any) -> web.Response:
        page, token = _paginate(items, query, self.page_size, 2500)
        body: dict[str, Any] = {
            "kind": "calendar#events",
            "etag": self._etag(),
            "summary": cal["summary"],
            "description": "",
            "updated": _stamp(),
            "timeZone": cal["timeZone"],
            "accessRole": "owner",
            "defaultReminders": [],
        }
        if token:
            body["nextPageToken"] = token
        body["items"] = page
        return _json(body)

    def _series(self, cal: dict, lo: datetime | None, hi: datetime | None) -> list[dict]:
        """``singleEvents=false``: single events, recurring masters and their exceptions."""
        zone = self._cal_zone(cal)
        out = []
        for event in cal["events"].values():
            if event.get("recurrence"):
                if next(_occurrences(event, zone, lo, hi), None) is not None:
                    out.append(event)
            elif _overlaps(event, zone, lo, hi):
                out.append(event)
        return out

    def _expanded(self, cal: dict, lo: datetime | None, hi: datetime | None) -> list[dict]:
        """``singleEvents=true``: recurring events become their instances."""
        zone = self._cal_zone(cal)
        out: list[dict] = []
        for event in cal["events"].values():
            if event.get("recurrence"):
                if event["status"] != "cancelled":
                    out.extend(self._instances_of(cal, event, lo, hi))
            elif _overlaps(event, zone, lo, hi):
                out.append(event)
        return out

    def _instances_of(
        self, cal: dict, master: dict, lo: datetime | None, hi: datetime | None
    ) -> list[dict]:
        """Generated instances, minus those replaced by stored exceptions."""
        zone = self._cal_zone(cal)
        found = (_instance(master, occ, zone) for occ in _occurrences(master, zone, lo, hi))
        return [inst for inst in found if inst["id"] not in cal["events"]]

    async def _events_instances(self, request: web.Request) -> web.Response:
        cal = self._calendar(request[_ACCOUNT], request.match_info["calendarId"])
        master = self._existing_event(cal, request.match_info["eventId"])
        if not master.get("recurrence"):
            raise _bad("The requested event is not a recurring event.")
        query, zone = request.query, self._cal_zone(cal)
        lo = _parse_rfc3339(query.get("timeMin"), "timeMin")
        hi = _parse_rfc3339(query.get("timeMax"), "timeMax")
        exceptions = [
            e
            for e in cal["events"].values()
            if e.get("recurringEventId") == master["id"]
            and _overlaps(e, zone, lo, hi)
            and (e["status"] != "cancelled" or _flag(query, "showDeleted", False))
        ]
        items = self._instances_of(cal, master, lo, hi) + exceptions
        items.sort(key=lambda e: _bounds(e, zone)[0])
        return self._events_page(cal, items, query)

    def add_event(
        self,
        account: str,
        calendar_id: str = "primary",
        *,
        summary: str,
        start: str | dict,
        end: str | dict,
        recurrence: list[str] | None = None,
        **fields: Any,
    ) -> dict:
        """Seed an event (``start``/``end``: ISO date, ISO datetime, or a Google time dict)."""
        with self._lock:
            self.ensure_account(account)
            cal = self._calendar(account, calendar_id)
            body = {"summary": summary, "start": _as_time(start), "end": _as_time(end), **fields}
            if recurrence:
                body["recurrence"] = list(recurrence)
            event = self._new_event(account, cal, body, fields.get("id") or self._new_event_id())
            cal["events"][event["id"]] = event
            return copy.deepcopy(event)


def _check_match(request: web.Request, event: dict) -> None:
    """``If-Match: <etag>`` on a write: Google answers 412 when the event changed since."""
    wanted = request.headers.get("If-Match")
    if wanted and wanted != event["etag"]:
        raise GoogleApiError(412, "conditionNotMet", "Precondition Failed")


def _as_time(value: str | dict) -> dict:
    if isinstance(value, dict):
        return value
    return {"dateTime": value} if "T" in value else {"date": value}


# --------------------------------------------------------------------------- tasks


def _due(value: Any) -> str | None:
    """Google keeps only the date of ``due``: ``YYYY-MM-DDT00:00:00.000Z``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad("Invalid value for: due")
    _parse_rfc3339(value, "due")
    return value[:10] + "T00:00:00.000Z"


class _TasksMixin:
    """Tasks v1: task lists and tasks (list/insert/get/patch/update/delete/clear)."""

    def _tasklist_key(self, account: str, tasklist: str) -> str:
        for key, meta in self.task_lists[account].items():
            if tasklist in (key, meta["id"]):
                return key
        raise _not_found()

    def _tasklist_json(self, meta: dict) -> dict:
        return {
            "kind": "tasks#taskList",
            "id": meta["id"],
            "etag": meta["etag"],
            "title": meta["title"],
            "updated": meta["updated"],
            "selfLink": f"{self.base_url}/tasks/v1/users/@me/lists/{meta['id']}",
        }

    async def _tasklists_list(self, request: web.Request) -> web.Response:
        lists = self.task_lists[request[_ACCOUNT]].values()
        items = [self._tasklist_json(meta) for meta in lists]
        page, token = _paginate(items, request.query, self.page_size, 1000)
        return _json(_task_envelope("tasks#taskLists", self._etag(), page, token))

    async def _tasklists_get(self, request: web.Request) -> web.Response:
        account = request[_ACCOUNT]
        key = self._tasklist_key(account, request.match_info["tasklist"])
        return _json(self._tasklist_json(self.task_lists[account][key]))

    def _task_bucket(self, request: web.Request) -> tuple[dict, dict]:
        account = request[_ACCOUNT]
        key = self._tasklist_key(account, request.match_info["tasklist"])
        return self.tasks[account][key], self.task_lists[account][key]

    def _existing_task(self, bucket: dict, task_id: str) -> dict:
        if task_id not in bucket:
            raise _not_found()
        return bucket[task_id]

    async def _tasks_list(self, request: web.Request) -> web.Response:
        bucket, _meta = self._task_bucket(request)
        query = request.query
        items = sorted(bucket.values(), key=lambda t: (t.get("parent", ""), t["position"]))
        items = [t for t in items if _task_visible(t, query)]
        page, token = _paginate(items, query, self.page_size, 100)
        return _json(_task_envelope("tasks#tasks", self._etag(), page, token))

    async def _tasks_insert(self, request: web.Request) -> web.Response:
        bucket, meta = self._task_bucket(request)
        query = request.query
        task = self._new_task(meta, request[_BODY] or {}, query.get("parent"))
        bucket[task["id"]] = task
        _reposition(bucket, task, query.get("previous"))
        return _json(task)

    def _new_task(self, meta: dict, body: dict, parent: str | None) -> dict:
        task_id = _b64(secrets.token_bytes(12))
        task = {
            "kind": "tasks#task",
            "id": task_id,
            "etag": self._etag(),
            "title": "",
            "updated": _stamp(),
            "status": "needsAction",
            "links": [],
            "selfLink": f"{self.base_url}/tasks/v1/lists/{meta['id']}/tasks/{task_id}",
            "webViewLink": f"https://tasks.google.com/task/{task_id}?sa=6",
        }
        task.update(_strip(body, _TASK_SERVER_FIELDS))
        if parent:
            task["parent"] = parent
        return _validated_task(task, {})

    async def _tasks_get(self, request: web.Request) -> web.Response:
        bucket, _meta = self._task_bucket(request)
        return _json(self._existing_task(bucket, request.match_info["task"]))

    async def _tasks_patch(self, request: web.Request) -> web.Response:
        return self._tasks_write(request, replace=False)

    async def _tasks_update(self, request: web.Request) -> web.Response:
        return self._tasks_write(request, replace=True)

    def _tasks_write(self, request: web.Request, *, replace: bool) -> web.Response:
        bucket, _meta = self._task_bucket(request)
        before = self._existing_task(bucket, request.match_info["task"])
        body = _strip(request[_BODY] or {}, _TASK_SERVER_FIELDS)
        keep = (*_TASK_SERVER_FIELDS, "links", "parent") if replace else tuple(before)
        task = {k: copy.deepcopy(v) for k, v in before.items() if k in keep}
        if replace:
            task.setdefault("status", "needsAction")
        _merge(task, body)
        task = _validated_task(task, before)
        task.update(etag=self._etag(), updated=_stamp())
        bucket[task["id"]] = task
        return _json(task)

    async def _tasks_delete(self, request: web.Request) -> web.Response:
        bucket, _meta = self._task_bucket(request)
        task = self._existing_task(bucket, request.match_info["task"])
        task.update(deleted=True, etag=self._etag(), updated=_stamp())
        return web.Response(status=204)

    async def _tasks_clear(self, request: web.Request) -> web.Response:
        """Hide every completed task, as ``tasks.clear`` does."""
        bucket, _meta = self._task_bucket(request)
        for task in bucket.values():
            if task["status"] == "completed":
                task.update(hidden=True, etag=self._etag(), updated=_stamp())
        return web.Response(status=204)

    def add_task(
        self,
        account: str,
        tasklist: str = "@default",
        *,
        title: str,
        due: str | None = None,
        notes: str | None = None,
        status: str = "needsAction",
    ) -> dict:
        """Seed a task at the top of ``tasklist``."""
        with self._lock:
            self.ensure_account(account)
            key = self._tasklist_key(account, tasklist)
            body = {"title": title, "status": status, "due": due, "notes": notes}
            task = self._new_task(self.task_lists[account][key], body, None)
            self.tasks[account][key][task["id"]] = task
            _reposition(self.tasks[account][key], task, None)
            return copy.deepcopy(task)


def _validated_task(task: dict, before: dict) -> dict:
    for name in [k for k, v in task.items() if v is None]:
        task.pop(name)
    if task.get("status") not in ("needsAction", "completed"):
        raise _bad("Invalid value for: status")
    if "due" in task:
        task["due"] = _due(task["due"])
    if task["status"] == "needsAction":
        task.pop("completed", None)
    elif task.get("completed") and task.get("completed") != before.get("completed"):
        task["completed"] = _stamp(_parse_rfc3339(task["completed"], "completed"))
    else:
        task["completed"] = before.get("completed") or _stamp()
    return task


def _task_visible(task: dict, query: Any) -> bool:
    if task.get("deleted") and not _flag(query, "showDeleted", False):
        return False
    if task.get("hidden") and not _flag(query, "showHidden", False):
        return False
    if task["status"] == "completed" and not _flag(query, "showCompleted", True):
        return False
    return _in_range(task.get("due"), query, "due") and _in_range(
        task.get("completed"), query, "completed"
    )


def _in_range(value: str | None, query: Any, name: str) -> bool:
    lo = _parse_rfc3339(query.get(f"{name}Min"), f"{name}Min")
    hi = _parse_rfc3339(query.get(f"{name}Max"), f"{name}Max")
    if lo is None and hi is None:
        return True
    if value is None:
        return False
    moment = datetime.fromisoformat(value)
    return (lo is None or moment >= lo) and (hi is None or moment < hi)


def _reposition(bucket: dict, task: dict, previous: str | None) -> None:
    """Put ``task`` first among its siblings, or right after ``previous``."""
    siblings = [
        t
        for t in sorted(bucket.values(), key=lambda t: t.get("position", ""))
        if t.get("parent") == task.get("parent") and t["id"] != task["id"]
    ]
    index = next((i + 1 for i, t in enumerate(siblings) if t["id"] == previous), 0)
    siblings.insert(index, task)
    for i, sibling in enumerate(siblings):
        sibling["position"] = f"{(i + 1) * 1000:020d}"


def _task_envelope(kind: str, etag: str, page: list, token: str | None) -> dict:
    body: dict[str, Any] = {"kind": kind, "etag": etag}
    if token:
        body["nextPageToken"] = token
    if page:
        body["items"] = page
    return body


# ---------------------------------------------------------------------------- server


class FakeGoogle(_OAuthMixin, _CalendarMixin, _TasksMixin, _GmailMixin):
    """Fake Google OAuth + Calendar v3 + Tasks v1 + Gmail v1 (tests/fakes/gmail_fake.py)
    on ``127.0.0.1``.

    State is public for assertions: :attr:`calendars` ``[account][calendar_key]`` (keys
    ``"primary"`` and the secondary calendar's id; each ``{"id", "summary", "timeZone",
    "events": {event_id: event}}``), :attr:`tasks` ``[account][list_key][task_id]``
    (key ``"@default"``), :attr:`task_lists` (list metadata), :attr:`requests` (every API
    call: method, path, query, json, authorization, account, status) and
    :attr:`token_requests` (token/revoke form posts).

    Test helpers: :meth:`authorize` / :meth:`authorize_sync` (consent), :meth:`issue_tokens`
    (tokens without the flow), :meth:`expire_access_tokens`, :meth:`revoke_account`,
    :meth:`add_event`, :meth:`add_task`, :meth:`ensure_account`, :meth:`client_config`.
    """

    def __init__(
        self,
        *,
        accounts: Sequence[str] = ("alice@example.com", "bob@example.com"),
        client_id: str = "fake-client-id.apps.googleusercontent.com",
        client_secret: str = "fake-client-secret",
        redirect_uris: Sequence[str] = (),
        page_size: int = 5,
        access_token_lifetime: int = 3599,
        calendar_time_zone: str = "UTC",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.client_id, self.client_secret = client_id, client_secret
        self.redirect_uris = list(redirect_uris)
        self.page_size, self.access_token_lifetime = page_size, access_token_lifetime
        self.calendar_time_zone, self.host, self.port = calendar_time_zone, host, port
        self.default_account = accounts[0] if accounts else "alice@example.com"
        self.requests: list[dict] = []
        self.stalled: asyncio.Event | None = None  # set: API calls wait until it is set
        self.latency = 0.0  # seconds each API call waits first (a network's round trip; bench)
        self.in_flight = 0  # API calls being answered now, and the most there were at once
        self.most_in_flight = 0
        # set to n: event listings wait (up to 10 s) until n of them are in flight together
        self.gather_listings: int | None = None
        self._listings: list[asyncio.Event] = []
        self.token_requests: list[dict] = []
        self.calendars: dict[str, dict[str, dict]] = {}
        self.tasks: dict[str, dict[str, dict[str, dict]]] = {}
        self.task_lists: dict[str, dict[str, dict]] = {}
        self._codes: dict[str, _Code] = {}
        self._access: dict[str, _Access] = {}
        self._refresh_tokens: dict[str, _Grant] = {}
        self._consented: dict[tuple[str, str], tuple[str, ...]] = {}
        self._etags = itertools.count(3_400_000_000_000_000)
        self._init_gmail()
        self._lock = threading.RLock()
        self._runner: web.AppRunner | None = None
        self._thread: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None
        self.base_url = ""
        for account in accounts:
            self.ensure_account(account)

    # -- endpoints ------------------------------------------------------------------

    @property
    def auth_uri(self) -> str:
        """Authorization endpoint (``auth_uri`` of the client config)."""
        return f"{self.base_url}/o/oauth2/auth"

    @property
    def token_uri(self) -> str:
        """Token endpoint (``token_uri``; also for ``Credentials(token_uri=...)``)."""
        return f"{self.base_url}/token"

    @property
    def revoke_uri(self) -> str:
        """Revocation endpoint."""
        return f"{self.base_url}/revoke"

    @property
    def calendar_endpoint(self) -> str:
        """``client_options={"api_endpoint": ...}`` for Calendar (trailing slash matters)."""
        return f"{self.base_url}/calendar/v3/"

    @property
    def gmail_endpoint(self) -> str:
        """``api_endpoint`` for Gmail (its method paths already start with ``gmail/v1/``)."""
        return self.base_url

    @property
    def tasks_endpoint(self) -> str:
        """``api_endpoint`` for Tasks (its method paths already start with ``tasks/v1/``)."""
        return self.base_url

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on the running loop and set :attr:`base_url`."""
        app = web.Application(middlewares=[self._middleware])
        self._add_routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self.base_url = f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeGoogle:
        """Start on the running loop."""
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop."""
        await self.stop()

    def start_in_thread(self, timeout: float = 10.0) -> None:
        """Serve from a private event loop on a daemon thread (for synchronous callers)."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fake-google", daemon=True)
        thread.start()
        self._thread = (loop, thread)
        asyncio.run_coroutine_threadsafe(self.start(), loop).result(timeout)

    def stop_thread(self, timeout: float = 10.0) -> None:
        """Stop the server started by :meth:`start_in_thread` and its thread."""
        if self._thread is None:
            return
        loop, thread = self._thread
        self._thread = None
        try:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            loop.close()

    def __enter__(self) -> FakeGoogle:
        """Start on a background thread."""
        self.start_in_thread()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the background thread."""
        self.stop_thread()

    # -- state ----------------------------------------------------------------------

    def ensure_account(self, account: str) -> None:
        """Create ``account`` with its primary + one secondary calendar and "My Tasks"."""
        with self._lock:
            if account in self.calendars:
                return
            secondary = f"family-{_digest(account)}@group.calendar.google.com"
            self.calendars[account] = {
                "primary": self._new_calendar(account, account, "1"),
                secondary: self._new_calendar(secondary, "Family", "7"),
            }
            list_id = _b64(f"tasklist:{account}".encode())[:22]
            meta = {"id": list_id, "title": "My Tasks", "etag": self._etag(), "updated": _stamp()}
            self.task_lists[account] = {"@default": meta}
            self.tasks[account] = {"@default": {}}

    def _new_calendar(self, cal_id: str, summary: str, color: str) -> dict:
        return {
            "id": cal_id,
            "summary": summary,
            "timeZone": self.calendar_time_zone,
            "colorId": color,
            "etag": self._etag(),
            "events": {},
        }

    def _etag(self) -> str:
        return f'"{next(self._etags)}"'

    # -- http plumbing --------------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        cal = "/calendar/v3"
        event = cal + "/calendars/{calendarId}/events/{eventId}"
        tasks = "/tasks/v1/lists/{tasklist}/tasks"
        app.add_routes(
            [
                web.get("/o/oauth2/auth", self._auth_page),
                web.post("/token", self._token),
                web.post("/revoke", self._revoke),
                web.get("/oauth2/v3/userinfo", self._userinfo),
                web.get(cal + "/users/me/calendarList", self._calendar_list),
                web.get(cal + "/users/me/calendarList/{calendarId}", self._calendar_list_get),
                web.get(cal + "/calendars/{calendarId}/events", self._events_list),
                web.post(cal + "/calendars/{calendarId}/events", self._events_insert),
                web.get(event, self._events_get),
                web.patch(event, self._events_patch),
                web.put(event, self._events_update),
                web.delete(event, self._events_delete),
                web.get(event + "/instances", self._events_instances),
                web.get("/tasks/v1/users/@me/lists", self._tasklists_list),
                web.get("/tasks/v1/users/@me/lists/{tasklist}", self._tasklists_get),
                web.get(tasks, self._tasks_list),
                web.post(tasks, self._tasks_insert),
                web.get(tasks + "/{task}", self._tasks_get),
                web.patch(tasks + "/{task}", self._tasks_patch),
                web.put(tasks + "/{task}", self._tasks_update),
                web.delete(tasks + "/{task}", self._tasks_delete),
                web.post("/tasks/v1/lists/{tasklist}/clear", self._tasks_clear),
                *self._gmail_routes(),
            ]
        )

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Authenticate and log API calls; render errors the way Google does."""
        record = self._record(request) if request.path.startswith(_API_PREFIXES) else None
        if record is not None and self.stalled is not None:
            await self.stalled.wait()  # an API that does not answer (until released)
        if record is not None:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if record is not None and self.latency:
                await asyncio.sleep(self.latency)
            if record is not None and self.gather_listings and request.method == "GET" and \
                    request.path.endswith("/events"):
                await self._gather_listing(self.gather_listings)
            return await self._answer(request, handler, record)
        finally:
            if record is not None:
                self.in_flight -= 1

    async def _gather_listing(self, wanted: int) -> None:
        arrived = asyncio.Event()
        self._listings.append(arrived)
        if len(self._listings) >= wanted:
            for waiting in self._listings:
                waiting.set()
            self._listings.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(arrived.wait(), 10)

    async def _answer(
        self, request: web.Request, handler: Any, record: dict | None
    ) -> web.StreamResponse:
        try:
            if record is None:
                return await handler(request)
            await self._admit(request, record)
            with self._lock:  # API handlers never await: the lock spans no suspension
                response = await handler(request)
        except (GoogleApiError, OAuthError) as exc:
            response = exc.response()
        except web.HTTPNotFound:
            response = _not_found().response()
        except web.HTTPMethodNotAllowed:
            response = GoogleApiError(405, "httpMethodNotAllowed", "Method Not Allowed").response()
        if record is not None:
            record["status"] = response.status
        return response

    def _record(self, request: web.Request) -> dict:
        record = {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "json": None,
            "authorization": request.headers.get("Authorization"),
            "account": None,
        }
        self.requests.append(record)
        return record

    async def _admit(self, request: web.Request, record: dict) -> None:
        """Parse the JSON body, resolve the account from the bearer token, check scopes."""
        raw = await request.read()
        try:
            request[_BODY] = record["json"] = json.loads(raw) if raw else None
        except ValueError as exc:
            raise _bad("Parse Error", "parseError") from exc
        with self._lock:
            grant = self._bearer_grant(record["authorization"] or "")
        record["account"] = request[_ACCOUNT] = grant.account
        needed = _needed_scopes(request.path, request.method)
        if needed and not needed.intersection(grant.scopes):
            raise GoogleApiError(
                403, "insufficientPermissions", "Request had insufficient authentication scopes."
            )

    async def _userinfo(self, request: web.Request) -> web.Response:
        account = request[_ACCOUNT]
        return _json({"sub": _digest(account, 21), "email": account, "email_verified": True})


def _needed_scopes(path: str, method: str) -> set[str]:
    """Any one of these scopes authorizes the call (empty: any valid token will do)."""
    read = method == "GET"
    if path.startswith("/calendar/v3/users/me/calendarList"):
        return _CAL_READ
    if path.startswith("/calendar/"):
        return _EVENTS_READ if read else _EVENTS_WRITE
    if path.startswith("/tasks/"):
        return _TASKS_READ if read else {TASKS_SCOPE}
    if path.startswith("/gmail/"):
        return gmail_needed_scopes(path, method)
    return set()
