"""Who acts, as a record names it, in a process whose user the machine does not know (a container's UID with no
passwd entry and no ``$USER``, as a pod's is): its number, never a traceback."""

from __future__ import annotations

import os
import pwd
import socket

import pytest


def test_a_uid_with_no_passwd_entry_and_no_user_variable_is_named_by_its_number(monkeypatch: pytest.MonkeyPatch) -> None:
    from platformctl.kernel.environment import Environment
    from platformctl.kernel.who import who

    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def unknown(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")  # what the C library answers for a UID it does not know

    monkeypatch.setattr(pwd, "getpwuid", unknown)
    assert who(Environment.from_os().aws) == f"uid-{os.getuid()}@{socket.gethostname()} (local)"
