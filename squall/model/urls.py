"""Secrets in messages and shown config: never show a password.

``redact`` masks the secrets of one connection string, in each form squall is given one:

- a URL's userinfo: ``amqp://user:pw@host/`` -> ``amqp://user:***@host/``;
- a URL's query parameters with a secret's name: ``postgresql://h/db?user=u&password=pw`` ->
  ``postgresql://h/db?user=u&password=***`` (``password``, ``passwd``, ``pwd``, ``secret``, ``token``,
  ``sasl.password``, ... in any case: see ``is_secret_name``);
- a libpq keyword/value string: ``host=h password=pw`` -> ``host=h password=***``, quoted values too
  (``password='a b'``);
- ``user:pw@host`` with no scheme: ``***@host``.

``redact_config`` shows a config: the value of every key with a secret's name is ``***``, and every other
string value goes through ``redact``, in nested dicts and lists too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_plus

MASK = "***"

# A name is a secret's when it holds one of these words (a key's separators . _ - count as word breaks).
_SECRET_WORDS = re.compile(
    r"password|passwd|passphrase|pwd|secret|token|credential|jaas"
    r"|api[._-]?key|private[._-]?key|key[._-]?pem|(?:^|[._-])(?:pass|key)$|(?:^|[._-])auth(?:[._-](?:data|payload))?$",
    re.IGNORECASE,
)
# One key=value of a libpq keyword string: the key after a space (or at the start), the value quoted or up to the
# next space.
_KEYWORD_VALUE = re.compile(
    r"(?<!\S)(?P<key>[A-Za-z_][\w.-]*)(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\S*)"
)
# One key=value of a URL's query: up to the next & or ; (a URL has no spaces, nor quotes that matter).
_QUERY_VALUE = re.compile(r"(?P<lead>^|[&;])(?P<key>[^=&;]+)=(?P<value>[^&;]*)")


def is_secret_name(name: str) -> bool:
    """Whether a config key, query parameter or libpq keyword names a secret: ``*.password``, ``passwd``,
    ``pwd``, ``*secret*``, ``*token*``, ``sasl.password``, ``ssl.key.password``, ``sasl.jaas.config``,
    ``ssl.key.pem``, ``*.key`` (a signing key), ``*.auth`` (a ``user:password`` pair), case-insensitive."""
    return bool(_SECRET_WORDS.search(name))


def _mask_query(query: str) -> str:
    def mask(match: re.Match) -> str:
        if not is_secret_name(unquote_plus(match["key"])):
            return match[0]
        return f"{match['lead']}{match['key']}={MASK}"

    return _QUERY_VALUE.sub(mask, query)


def _mask_keywords(text: str) -> str:
    def mask(match: re.Match) -> str:
        return f"{match['key']}{match['eq']}{MASK}" if is_secret_name(match["key"]) else match[0]

    return _KEYWORD_VALUE.sub(mask, text)


def redact(url: str) -> str:
    """``url`` (any connection string) with its secrets masked: see the module's docstring.

    In a URL, everything between ``user:`` and the last ``@`` before the path is masked, so a password with
    unescaped ``/``, ``#`` or ``@`` in it is hidden too.
    """
    if not isinstance(url, str):
        return url
    scheme, sep, rest = url.partition("://")
    if sep and scheme and not any(c.isspace() or c in "=@" for c in scheme):
        if "@" in rest:
            userinfo, _, host = rest.rpartition("@")
            user, colon, _ = userinfo.partition(":")
            if colon:
                rest = f"{user}:{MASK}@{host}"
        before, question, query = rest.partition("?")
        return f"{scheme}://{before}" + (f"?{_mask_query(query)}" if question else "")
    if "=" in url:  # a libpq keyword/value string (host=h port=5432 password=pw)
        return _mask_keywords(url)
    if "@" in url:  # user:password@host: hide all that precedes the host
        return f"{MASK}@" + url.rpartition("@")[2]
    return url


def redact_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` as squall shows it: secrets masked (see the module's docstring); values JSON can carry are kept
    as they are, others (paths, objects) shown as text."""
    return {str(key): _shown(key, value) for key, value in conf.items()}


def _shown(key: Any, value: Any) -> Any:
    if value is not None and value != "" and isinstance(key, str) and is_secret_name(key):
        return MASK
    if isinstance(value, Mapping):
        return redact_config(value)
    if isinstance(value, (list, tuple)):
        return [_shown(None, v) for v in value]
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact(os.fspath(value)) if isinstance(value, os.PathLike) else redact(repr(value))
