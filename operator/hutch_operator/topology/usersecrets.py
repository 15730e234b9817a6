"""A User's credentials Secret ``<user>-user-credentials``: created, kept in step, and read.

Why a module of its own: this is the one place a password is generated or read, and it must
never reach status, events or logs; errors here name Secrets and keys, never values. The
Secret is owned by the User (ownerReference), so Kubernetes' garbage collector removes it with
the User; the operator needs no ``delete`` on Secrets. Which Secret holds the password:

- generated (default): ``<user>-user-credentials`` itself; a missing Secret or ``password``
  key gets a new ``secrets.token_urlsafe(32)`` (256 bits), an edited password is rotated;
- imported (``spec.importCredentialsSecret``): the user's Secret (key ``password``, optional
  ``username``); ``<user>-user-credentials`` is written from it for applications.

The source Secret's ``resourceVersion`` is the credentials' version: status records it when
the password went to the broker, and a different one later means "rotate".
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass, field
from typing import Any

from hutch_operator.core import errors, kube
from hutch_operator.models import common, users
from hutch_operator.topology import tenancy

PASSWORD_BYTES = 32


@dataclass(frozen=True)
class Credentials:
    password: str = field(repr=False)
    version: str
    secret: str


def _path(namespace: str, name: str) -> str:
    return kube.object_path("v1", "secrets", namespace, name)


def _decoded(body: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (body.get("data") or {}).items()}


def _owned_by(body: dict[str, Any], uid: str) -> bool:
    refs = body.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


def source_name(spec: users.UserSpec, user_object: str) -> str:
    """The Secret whose change means a new password."""
    if spec.import_credentials_secret is not None:
        return spec.import_credentials_secret.name
    return tenancy.credentials_secret_name(user_object)


async def version(namespace: str, spec: users.UserSpec, user_object: str) -> str | None:
    """The source Secret's resourceVersion (None when it is gone): one GET, no data kept."""
    body = await kube.api().get(_path(namespace, source_name(spec, user_object)))
    return None if body is None else str(body["metadata"].get("resourceVersion", ""))


async def ensure(
    owner: tuple[str, str, str], spec: users.UserSpec, username: str, base: str
) -> Credentials:
    """The password to send to the broker, with ``<user>-user-credentials`` up to date.

    ``owner`` is the User's (namespace, name, uid).
    """
    namespace, user_object, _ = owner
    own = tenancy.credentials_secret_name(user_object)
    if spec.import_credentials_secret is None:
        password, written = await _write(owner, username, None, base, spec.uri_vhost)
        return Credentials(password, written, own)
    name = spec.import_credentials_secret.name
    body = await kube.api().get(_path(namespace, name))
    if body is None:
        raise errors.CredentialsSecretInvalidError(f"Secret {namespace}/{name} not found")
    data = _decoded(body)
    if not data.get("password"):
        raise errors.CredentialsSecretInvalidError(f"Secret {namespace}/{name} lacks password")
    if data.get("username") not in (None, "", username):
        raise errors.CredentialsSecretInvalidError(
            f"Secret {namespace}/{name} key username names another user than {username}"
        )
    password, _ = await _write(owner, username, data["password"], base, spec.uri_vhost)
    return Credentials(password, str(body["metadata"].get("resourceVersion", "")), own)


async def _write(
    owner: tuple[str, str, str], username: str, password: str | None, base: str, vhost: str
) -> tuple[str, str]:
    """Creates or updates ``<user>-user-credentials``; (password, its resourceVersion).

    ``password`` None means "the Secret's own, or a new one when it has none".
    """
    namespace, user_object, uid = owner
    name = tenancy.credentials_secret_name(user_object)
    body = await kube.api().get(_path(namespace, name))
    if body is None:
        password = password or secrets.token_urlsafe(PASSWORD_BYTES)
        data = tenancy.credentials_data(username, password, base, vhost)
        created = await kube.api().create(
            kube.object_path("v1", "secrets", namespace), _secret(owner, name, data)
        )
        return password, str(created["metadata"]["resourceVersion"])
    if not _owned_by(body, uid):
        raise errors.CredentialsSecretInvalidError(
            f"Secret {namespace}/{name} exists and is not owned by User {user_object}: delete "
            "it, or use it through spec.importCredentialsSecret"
        )
    current = _decoded(body)
    password = password or current.get("password") or secrets.token_urlsafe(PASSWORD_BYTES)
    data = tenancy.credentials_data(username, password, base, vhost)
    if all(current.get(key) == value for key, value in data.items()):
        return password, str(body["metadata"]["resourceVersion"])
    patched = await kube.api().merge_patch(_path(namespace, name), {"stringData": data})
    return password, str(patched["metadata"]["resourceVersion"])


def _secret(owner: tuple[str, str, str], name: str, data: dict[str, str]) -> dict[str, Any]:
    namespace, user_object, uid = owner
    reference = {"apiVersion": common.API_VERSION, "kind": "User", "name": user_object,
                 "uid": uid, "controller": True}  # fmt: skip
    labels = {"app.kubernetes.io/managed-by": "hutch-operator"}
    metadata = {"name": name, "namespace": namespace, "labels": labels,
                "ownerReferences": [reference]}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata,
            "stringData": data}  # fmt: skip
