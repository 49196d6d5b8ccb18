"""JWT bearer tokens (RFC 6750, RFC 7519) checked against the issuer's public key.

Settings (``[authentication]``): ``jwt.public.key.file`` (PEM: a public key or a
certificate holding one), ``jwt.algorithms`` (comma-separated), ``jwt.issuer`` and
``jwt.audience`` (checked when set), ``jwt.principal.claim`` (the user's name).

Only asymmetric algorithms are taken, and only those that fit the key's type (RSA:
RS*/PS*; EC: ES*; Ed25519/Ed448: EdDSA): ``none`` would accept unsigned tokens, and
an HS* algorithm with a public key would let anyone holding the (public) key sign
(the classic algorithm-confusion attack). PyJWT checks the signature, ``exp``
(required), ``nbf`` and ``iat`` (each with a leeway for clock skew), ``iss`` and ``aud``.

A signature check costs 70 us (RS256) to 130 us (ES256) of the event loop, on every
request of a client; so a token that passed is remembered, keyed by an HMAC (a random
key made per process) of the token, until its ``exp`` (at most :data:`CACHE_SIZE`
tokens, the oldest forgotten first). A token that failed is never remembered.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import jwt

from conf.errors import ConfigError
from ingest_gateway.errors import NotAuthenticated

_FAMILIES = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "EC": ("ES256", "ES384", "ES512", "ES256K"),
    "OKP": ("EdDSA",),
}
ASYMMETRIC = frozenset(a for algs in _FAMILIES.values() for a in algs)
#: a user name from a token: this long at most
MAX_NAME_CHARS = 255
#: tokens remembered as checked, at most
CACHE_SIZE = 4096


def _load_key(path: str) -> tuple[Any, str]:
    """(the public key in ``path``, its family: RSA, EC or OKP). Raises ConfigError."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    key_name = "authentication.jwt.public.key.file"
    if not path:
        raise ConfigError(key_name, "", "bearer authentication needs the issuer's public key")
    try:
        with open(path, "rb") as f:
            pem = f.read()
    except OSError as e:
        raise ConfigError(key_name, path, f"cannot be read: {e.strerror or e}") from None
    try:
        key = x509.load_pem_x509_certificate(pem).public_key() \
            if b"-----BEGIN CERTIFICATE-----" in pem else load_pem_public_key(pem)
    except ValueError as e:
        raise ConfigError(key_name, path, f"not a PEM public key or certificate: {e}") from None
    for family, kinds in (("RSA", (rsa.RSAPublicKey,)), ("EC", (ec.EllipticCurvePublicKey,)),
                          ("OKP", (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey))):
        if isinstance(key, kinds):
            return key, family
    raise ConfigError(key_name, path, f"a {type(key).__name__} cannot check JWT signatures")


def _algorithms(text: str, family: str) -> list[str]:
    """The configured algorithms that fit the key; ConfigError naming
    ``authentication.jwt.algorithms`` for none, HS*, unknown ones or none that fit."""
    key = "authentication.jwt.algorithms"
    given = [a.strip() for a in text.split(",") if a.strip()]
    for a in given:
        if a.lower() == "none" or a.upper().startswith("HS"):
            raise ConfigError(key, text, f"{a} is refused: only public-key signatures "
                                         "(RS*, PS*, ES*, EdDSA) prove the issuer signed")
        if a not in ASYMMETRIC:
            raise ConfigError(key, text, f"unknown algorithm {a!r}; expected some of "
                                         f"{', '.join(sorted(ASYMMETRIC))}")
    fit = [a for a in given if a in _FAMILIES[family]]
    if not fit:
        raise ConfigError(key, text, f"none fits the public key (an {family} key signs "
                                     f"with {', '.join(_FAMILIES[family])})")
    return fit


class BearerVerifier:
    """Checks a JWT and returns the user it names (module doc)."""

    def __init__(self, key: Any, algorithms: list[str], *, issuer: str = "",
                 audience: str = "", claim: str = "sub", leeway_s: float = 30,
                 wall: Callable[[], float] = time.time):
        self.key, self.algorithms, self.claim, self.leeway_s = key, algorithms, claim, leeway_s
        self._wall = wall  # exp is wall-clock time
        self._hmac_key = secrets.token_bytes(32)
        self._ok: dict[bytes, tuple[str, float]] = {}  # HMAC of a token -> (user, its exp)
        self._lock = threading.Lock()
        self.issuer, self.audience = issuer or None, audience or None
        require = ["exp"] + (["iss"] if issuer else []) + (["aud"] if audience else [])
        self._options = {"require": require, "verify_signature": True, "verify_exp": True,
                         "verify_nbf": True, "verify_iat": True,
                         "verify_iss": bool(issuer), "verify_aud": bool(audience)}

    @classmethod
    def from_settings(cls, a: Any, *, leeway_s: float = 30) -> "BearerVerifier":
        """From ``[authentication]`` (``a``); raises ConfigError naming the key of a
        missing or unusable public key, or of refused algorithms."""
        key, family = _load_key(a.jwt_public_key_file)
        if not a.jwt_principal_claim:
            raise ConfigError("authentication.jwt.principal.claim", "", "name the claim "
                                                                        "holding the user")
        return cls(key, _algorithms(a.jwt_algorithms, family), issuer=a.jwt_issuer,
                   audience=a.jwt_audience, claim=a.jwt_principal_claim, leeway_s=leeway_s)

    def verify(self, token: bytes) -> str:
        """The user name the token's principal claim holds (from the cache if it passed
        before and has not expired). Raises NotAuthenticated (never repeating the
        token) for any token that does not pass."""
        return self.verify_until(token)[0]

    def verify_until(self, token: bytes) -> tuple[str, float]:
        """(:meth:`verify`'s user name, the token's ``exp`` in wall-clock seconds): a SASL
        session ends with its token (KIP-368). Raises NotAuthenticated as ``verify``."""
        digest = hmac.digest(self._hmac_key, token, "sha256")
        hit = self._ok.get(digest)
        if hit is not None and self._wall() < hit[1]:
            return hit
        name, expires = self._check(token)
        with self._lock:
            if len(self._ok) >= CACHE_SIZE:
                self._ok.pop(next(iter(self._ok)), None)  # the oldest entry
            self._ok[digest] = (name, expires)
        return name, expires

    def _check(self, token: bytes) -> tuple[str, float]:
        """(user, exp) of a token that passes every check; NotAuthenticated otherwise."""
        try:
            claims = jwt.decode(token, self.key, algorithms=self.algorithms,
                                issuer=self.issuer, audience=self.audience,
                                leeway=self.leeway_s, options=self._options)
        except jwt.ExpiredSignatureError:
            raise NotAuthenticated("the bearer token has expired") from None
        except jwt.ImmatureSignatureError:
            raise NotAuthenticated("the bearer token is not valid yet") from None
        except (jwt.InvalidIssuerError, jwt.InvalidAudienceError):
            raise NotAuthenticated("the bearer token is for another issuer or audience") \
                from None
        except jwt.MissingRequiredClaimError as e:
            raise NotAuthenticated(f"the bearer token has no {e.claim!r} claim") from None
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            # hostile or broken tokens: whatever PyJWT found, the answer is a 401
            raise NotAuthenticated("the bearer token is not valid") from None
        name = claims.get(self.claim)
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS \
                or any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise NotAuthenticated(f"the bearer token's {self.claim!r} claim is not a user "
                                   "name")
        return name, float(claims["exp"])  # required, and a number once decoded
