"""Secrets kept out of what initorch writes: reports, traces, timelines, status files.

A server's command line and environment carry credentials (``--api-key``,
``HF_TOKEN``, ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``), and a report that
copies them lands in CI artefacts and bug reports.  Everything that writes a file
for people or tools passes its data through :func:`redact` (or one of the
narrower functions below) first; this module is the only place that decides what
a secret is:

* a *name* is secret when one of its words (split on ``_``, ``-``, ``.``, case
  ignored) is in :data:`SECRET_WORDS` (``key`` only after ``api``/``access``/
  ``secret``/``private``..., so that ``cache_key`` and ``--key-layout`` stay);
* a *value* is secret when it is given under a secret name: as an environment
  variable, ``--api-key VALUE``, ``--api-key=VALUE``, ``NAME=VALUE``, a mapping's
  key, the ``*value*`` fields of a record ``{"name": NAME, ...}``, or a URL's ``user:password@``;
* and any text is scrubbed of every secret value of the environment at least
  :data:`MIN_SECRET_LENGTH` long, wherever it occurs (a token echoed in an error
  message).

What is redacted becomes :data:`REDACTED`; nothing else changes, and redacting
twice changes nothing more.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

REDACTED = "<redacted>"

SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "credential",
                          "credentials", "auth", "authorization", "cookie", "apikey",
                          "passphrase"})
"""Words that make a name secret wherever they stand in it (not ``pwd``: ``PWD`` is the
working directory)."""

KEY_QUALIFIERS = frozenset({"api", "access", "secret", "private", "admin", "signing",
                            "encryption", "client", "service"})
"""``key`` makes a name secret only after one of these (``API_KEY``, ``--admin-api-key``);
``cache_key``, ``--key-layout`` are not."""

MIN_SECRET_LENGTH = 6
"""Shorter values are redacted where they stand under a secret name, but not hunted
for in free text: a 3-letter "secret" would blank out every word that contains it."""

_WORDS = re.compile(r"[^a-z0-9]+")
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@/\s]+(?=@)")
_ASSIGNMENT = re.compile(r"^(?P<name>-{0,2}[A-Za-z_][A-Za-z0-9_.-]*)=(?P<value>.*)$", re.DOTALL)


def is_secret_name(name: str) -> bool:
    """Whether a variable, option or key called ``name`` holds a secret."""
    words = [word for word in _WORDS.split(name.lower()) if word]
    for index, word in enumerate(words):
        if word in SECRET_WORDS:
            return True
        if word == "key" and index and words[index - 1] in KEY_QUALIFIERS:
            return True
    return False


def environment_secrets(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The values of ``environ``'s (default: this process's) secret variables that are
    long enough to look for in text."""
    source = os.environ if environ is None else environ
    return frozenset(value for name, value in source.items()
                     if is_secret_name(name) and len(value) >= MIN_SECRET_LENGTH)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without a URL's password and without any of ``secrets`` (longest first,
    so that a secret containing another is redacted whole)."""
    text = _URL_PASSWORD.sub(lambda match: match.group("scheme") + REDACTED, text)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_SECRET_LENGTH and secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _given_on(words: list[str]) -> tuple[set[int], set[str]]:
    """The positions of a command line whose whole word is a secret value (after
    ``--api-key``), and every secret value it gives (``--api-key=X``, ``HF_TOKEN=X`` too)."""
    hidden: set[int] = set()
    given: set[str] = set()
    for index, word in enumerate(words):
        assignment = _ASSIGNMENT.match(word)
        if assignment is not None and is_secret_name(assignment.group("name")):
            given.add(assignment.group("value"))
        elif word.startswith("-") and is_secret_name(word) and index + 1 < len(words) \
                and not words[index + 1].startswith("--"):  # a flag hides no option
            hidden.add(index + 1)
            given.add(words[index + 1])
    return hidden, given


def redact_argv(argv: Iterable[str], secrets: Iterable[str] = ()) -> list[str]:
    """A command line with the value of every secret option (``--api-key X``,
    ``--api-key=X``) and assignment (``HF_TOKEN=X``) redacted, and those values and
    ``secrets`` scrubbed from every other word (a token given twice)."""
    words = list(argv)
    hidden, given = _given_on(words)
    given.update(secrets)
    result: list[str] = []
    for index, word in enumerate(words):
        assignment = _ASSIGNMENT.match(word)
        if index in hidden:
            result.append(REDACTED)
        elif assignment is not None and is_secret_name(assignment.group("name")):
            result.append(f"{assignment.group('name')}={REDACTED}")
        else:
            result.append(redact_text(word, given))
    return result


def redact_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with every secret variable's value redacted, and the secret values
    scrubbed from the others (``CURL_OPTS=-H 'Authorization: <token>'``)."""
    secrets = environment_secrets(environ)
    return {name: REDACTED if is_secret_name(name) else redact_text(value, secrets)
            for name, value in environ.items()}


def redact(data: Any, secrets: Iterable[str] | None = None) -> Any:
    """JSON-like ``data`` (dicts, lists, strings, numbers) with secrets redacted: the
    value under a secret key, a command line (a list of strings under a key named
    ``argv``/``cmdline``/``command``), and, in every string, the secret values given
    on any such command line and ``secrets`` (default: this process's
    :func:`environment_secrets`).  A new structure; ``data`` is left
    as it is."""
    known = set(environment_secrets() if secrets is None else secrets)
    for words in _command_lines(data):  # a token given on a command line, found anywhere
        known.update(_given_on(words)[1])
    return _redact(data, frozenset(known))


def _command_lines(data: Any) -> Iterator[list[str]]:
    """Every command line in ``data`` (a list of strings under a command key)."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            for key, value in item.items():
                if _is_command(key, value):
                    yield list(value)
                else:
                    pending.append(value)
        elif isinstance(item, list | tuple):
            pending.extend(item)


def _is_command(key: Any, value: Any) -> bool:
    return key in _COMMAND_KEYS and isinstance(value, list) \
        and all(isinstance(word, str) for word in value)


_COMMAND_KEYS = frozenset({"argv", "cmdline", "command", "command_line", "args"})


def _redact(data: Any, secrets: frozenset[str]) -> Any:
    if isinstance(data, str):
        return redact_text(data, secrets)
    if isinstance(data, Mapping):
        named = data.get("name")
        record_of_secret = isinstance(named, str) and is_secret_name(named)
        redacted: dict[Any, Any] = {}
        for key, value in data.items():
            secret_key = isinstance(key, str) and is_secret_name(key)
            value_of_secret = record_of_secret and isinstance(key, str) and "value" in key
            if value is not None and (secret_key or value_of_secret):
                redacted[key] = REDACTED
            elif _is_command(key, value):
                redacted[key] = redact_argv(value, secrets)
            else:
                redacted[key] = _redact(value, secrets)
        return redacted
    if isinstance(data, list | tuple):
        return [_redact(item, secrets) for item in data]
    return data
