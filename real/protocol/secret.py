"""The per-job secret: where the job's keys live, and proof that a party holds it.

The coordinator draws 32 random bytes (`secrets`) when the job starts and hands them to
its launchers and workers by file (mode 0600) or the environment (`OOBLAB_SECRET`),
never on a command line or in a log. Everything else is derived from it with HMAC-SHA256
under distinct labels, so no derived value reveals the secret or another derived value:

- `key_prefix`: every key of the job lives under this name (a `PrefixStore`), apart from
  other jobs' keys; it is no barrier to a party that reaches the store, which can list
  every key (TCPStore's `list_keys`): see the threat model in docs/real-backend.md;
- `gate_answer`: the answer to the store gate's challenge, so only a holder reaches the
  store of a job on a network address (`gate`); a wrong secret is refused there at once;
- `check`: published under a public key by a loopback job (no gate), so that a worker
  with the wrong secret is told so at once;
- `sign`: registrations, the published job, the coordinator's orders and each
  generation's directive carry a MAC over key and value, so a party that knows the
  prefix cannot forge a worker, rewrite the job's directories, or forge or replay an
  order or a directive.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets as _secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECRET_ENV = "OOBLAB_SECRET"
SECRET_BYTES = 32
_HEX = re.compile(rf"[0-9a-f]{{{2 * SECRET_BYTES}}}")


class SecretError(ValueError):
    """No secret, an unreadable or badly protected secret file, or a secret the job refuses."""


@dataclass(frozen=True)
class JobSecret:
    """The job's secret as lowercase hex; `repr` never shows it."""

    hex: str

    def __post_init__(self):
        if not _HEX.fullmatch(self.hex):
            raise SecretError(f"a job secret is {2 * SECRET_BYTES} lowercase hex digits")

    def __repr__(self) -> str:
        return "JobSecret(<hidden>)"

    __str__ = __repr__

    @classmethod
    def generate(cls) -> JobSecret:
        return cls(_secrets.token_hex(SECRET_BYTES))

    def _mac(self, label: str, payload: bytes = b"") -> str:
        return hmac.new(bytes.fromhex(self.hex), label.encode() + b"\0" + payload, hashlib.sha256).hexdigest()

    @property
    def key_prefix(self) -> str:
        """The name the job's keys live under."""
        return "job-" + self._mac("ooblab key prefix")[:32]

    @property
    def check(self) -> str:
        """What a loopback coordinator publishes so a worker can tell a wrong secret at once."""
        return self._mac("ooblab secret check")

    def gate_answer(self, nonce: bytes) -> bytes:
        """The answer to the store gate's challenge `nonce` (`gate`)."""
        return bytes.fromhex(self._mac("ooblab gate", nonce))

    def sign(self, value: Mapping[str, Any]) -> str:
        return self._mac("ooblab record", canonical(value))

    def verify(self, value: Mapping[str, Any], mac: Any) -> bool:
        return isinstance(mac, str) and hmac.compare_digest(self.sign(value), mac)


def canonical(value: Any) -> bytes:
    """One byte string per JSON value (sorted keys, no spaces): what a MAC covers."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_secret_file(path: str | Path, secret: JobSecret) -> Path:
    """Write the secret to `path`, readable by this user only (created 0600, then checked)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (secret.hex + "\n").encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        raise SecretError(f"cannot write the secret file {path}: {exc.strerror or exc}") from None
    return path


def read_secret_file(path: str | Path) -> JobSecret:
    """The secret in `path`, refused when other users can read or write the file."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as exc:
        raise SecretError(f"cannot read the secret file {path}: {exc.strerror or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretError(f"the secret file {path} is open to other users (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    try:
        return JobSecret(text)
    except SecretError:
        raise SecretError(
            f"the secret file {path} does not hold a job secret ({2 * SECRET_BYTES} hex digits)"
        ) from None


def load_secret(path: str | Path | None, environ: Mapping[str, str] | None = None) -> JobSecret:
    """The secret a launcher or worker presents: `--secret-file`, else `$OOBLAB_SECRET`."""
    if path:
        return read_secret_file(path)
    text = (os.environ if environ is None else environ).get(SECRET_ENV, "").strip()
    if not text:
        raise SecretError(f"no job secret: pass --secret-file (written by ooblab coordinator) or set {SECRET_ENV}")
    try:
        return JobSecret(text)
    except SecretError:
        raise SecretError(f"${SECRET_ENV} does not hold a job secret ({2 * SECRET_BYTES} hex digits)") from None
