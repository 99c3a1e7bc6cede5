"""Secrets never stored or shown: masking of credentials in URLs and configs, and API keys from the environment.

A database or tracking URL may carry a password (`postgresql://user:PASSWORD@host/db`, percent-encoded
or not: `/`, `@`, quotes and spaces included), a token in its query string (`https://host/api?token=...`),
or be a key=value DSN (`host=h password='p w' dbname=d`, ODBC `Pwd={...};`). The process connects with
the real URL, kept in memory only; everything written to disk, to MLflow, to the trajectory store, to the
dashboard or to a log goes through `mask_secrets` first, which keeps the URL readable
(`postgresql://user:***@host/db`) but without the secret.

Mapping values under secret-looking keys (`password`, `token`, `api_key`, `secret`, ...) are masked whole;
a key ending in `_env` names an environment variable (`api_key_env: OPENAI_API_KEY`) and is kept, since it
is where the key is read from, not the key (`api_key_from_env`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

# URLs are parsed, not pattern-matched on characters: a careless password holds `/`, `@`, `:`, quotes,
# spaces or `#` unencoded, and RFC 3986 cannot say where such a userinfo ends. The rule here: after
# `scheme://user:` the password runs to the LAST `@` of the same whitespace-free run (a password may hold
# `@` and `/`), or, when that run has no `@`, to the last `@` of the line before the next URL (a password
# with a space). Masking too much is safe; the user name stays (it says which account is used).
_SCHEME = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://")
_SECRET_WORDS = r"password|passwd|pwd|pass|token|secret|api[_\-]?key|apikey|key|sig|signature|credential|auth"
# query strings and DSN key=value forms (libpq `password='a b'`, ODBC `Pwd=x;`, `?sslpassword=`, S3's
# `X-Amz-Security-Token=`): any key whose last word is secret-looking; a quoted value may hold anything
_KV = re.compile(rf"(?P<head>(?:^|(?<=[\s?&;,(]))[\w.\-]*?(?:{_SECRET_WORDS})\s*=\s*)"
                 r"(?P<val>'(?:[^'\\]|\\.)*'|\{[^}]*\}|\"(?:[^\"\\]|\\.)*\"|[^\s&;#'\"]+)", re.IGNORECASE)
_SECRET_KEY = re.compile(r"(^|[._\-])(password|passwd|secret|token|api_key|apikey|access_key|private_key)$",
                         re.IGNORECASE)


def _mask_userinfo(text: str) -> str:
    out, pos = [], 0
    for m in _SCHEME.finditer(text):
        if m.start() < pos:
            continue
        rest_start = m.end()
        line_end = text.find("\n", rest_start)
        line_end = len(text) if line_end < 0 else line_end
        nxt = _SCHEME.search(text, rest_start, line_end)
        limit = nxt.start() if nxt else line_end
        run_end = rest_start
        while run_end < limit and not text[run_end].isspace():
            run_end += 1
        at = text.rfind("@", rest_start, run_end)
        if at < 0:
            at = text.rfind("@", rest_start, limit)
        if at < 0:
            continue
        colon = text.find(":", rest_start, at)
        # a `/` before the colon puts the colon past the authority (a path); `host:8000/...@` is a port
        # followed by a path holding an `@`: neither has a password
        secret = text[colon + 1:at] if colon >= 0 else ""
        port_then_path = "/" in secret and secret.split("/")[0].isdigit()
        if colon < 0 or "/" in text[rest_start:colon] or secret in ("", MASK) or port_then_path:
            continue
        out.append(text[pos:colon + 1] + MASK)
        pos = at
    out.append(text[pos:])
    return "".join(out)


def mask_text(text: str) -> str:
    """`text` with every URL password, secret query value and DSN `password=` value replaced by `***`."""
    if "://" not in text and "=" not in text:
        return text
    if "://" in text:
        text = _mask_userinfo(text)
    if "=" in text:
        text = _KV.sub(lambda m: m.group(0) if m.group("val") == MASK else m.group("head") + MASK, text)
    return text


def has_secret(text: str) -> bool:
    """Whether `text` holds a credential that `mask_text` would hide."""
    return mask_text(text) != text


def is_secret_key(key: str) -> bool:
    k = str(key)
    return not k.lower().endswith("_env") and _SECRET_KEY.search(k) is not None


def mask_secrets(obj: Any) -> Any:
    """A copy of `obj` (dicts, lists, tuples, strings; other values as they are) with secrets masked."""
    if isinstance(obj, str):
        return mask_text(obj)
    if isinstance(obj, Mapping):
        return {k: (MASK if is_secret_key(k) and v not in (None, "") else mask_secrets(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [mask_secrets(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(mask_secrets(v) for v in obj)
    return obj


def api_key_from_env(var: str | None, owner: str = "the endpoint") -> str | None:
    """The API key held by environment variable `var` (None: no key). Raises naming the variable if unset."""
    if not var:
        return None
    key = os.environ.get(var)
    if not key:
        raise RuntimeError(f"environment variable {var} (the API key of {owner}) is not set; "
                           f"export {var}=<key> or leave api_key_env empty for an endpoint without a key")
    return key


def _mask_record(record: logging.LogRecord) -> logging.LogRecord:
    """Replace the record's message by its masked text when it holds a secret (in place)."""
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a malformed record is the logging module's to report
        return record
    masked = mask_text(message)
    if masked != message:
        record.msg, record.args = masked, None
    return record


class MaskingFilter(logging.Filter):
    """A logging filter that masks secrets in the formatted message (attach to handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        _mask_record(record)
        return True


def install_log_masking(logger: logging.Logger | None = None) -> None:
    """Mask secrets in every record that reaches the handlers of `logger` (default: the root logger)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, MaskingFilter) for f in handler.filters):
            handler.addFilter(MaskingFilter())


def install_record_masking() -> None:
    """Mask secrets in every log record the process creates, whichever logger or handler it reaches
    (libraries such as MLflow and Prefect attach their own handlers, which a handler filter would miss).
    Idempotent; entry points (the CLI) call it once at start."""
    current = logging.getLogRecordFactory()
    if getattr(current, "_envace_masking", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return _mask_record(current(*args, **kwargs))

    factory._envace_masking = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
