"""Redaction: no secret of the command line or the environment survives in what
initorch writes, and nothing else changes."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from initorch.reporting.redaction import (
    MIN_SECRET_LENGTH,
    REDACTED,
    environment_secrets,
    is_secret_name,
    redact,
    redact_argv,
    redact_environment,
    redact_text,
)

SECRET_VARIABLES = ["HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
                    "GITHUB_TOKEN", "hf_token", "MY_SERVICE_CREDENTIALS", "WANDB_API_KEY"]
SECRET_OPTIONS = ["--api-key", "--admin-api-key", "--hf-token", "--password", "--auth-token"]
PLAIN_NAMES = ["PATH", "PWD", "OLDPWD", "CUDA_VISIBLE_DEVICES", "cache_key", "--key-layout",
               "max_tokens", "--tokenizer-path", "MC_FORCE_TCP", "--model-path", "page_size"]

secrets = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]),
                  min_size=MIN_SECRET_LENGTH, max_size=40)
plain_words = st.text(st.characters(codec="ascii", categories=["L", "N"]), max_size=20)


def outside_marker(secret: str) -> bool:
    return secret not in REDACTED


@pytest.mark.parametrize("name", SECRET_VARIABLES + SECRET_OPTIONS)
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_names(name):
    assert not is_secret_name(name)


@given(secret=secrets, name=st.sampled_from(SECRET_OPTIONS), words=st.lists(plain_words),
       joined=st.booleans())
def test_a_secret_option_never_survives_on_a_command_line(secret, name, words, joined):
    assume(outside_marker(secret) and not secret.startswith("--"))
    argv = ["python", *words, *([f"{name}={secret}"] if joined else [name, secret]), *words]
    redacted = redact_argv(argv)
    assert secret not in " ".join(redacted)
    scrubbed = [word.replace(secret, REDACTED) for word in words]  # the rest stays
    assert redacted == ["python", *scrubbed,
                        *([f"{name}={REDACTED}"] if joined else [name, REDACTED]), *scrubbed]
    assert redact_argv(redacted) == redacted  # twice changes nothing more


@given(secret=secrets, name=st.sampled_from(SECRET_VARIABLES), before=plain_words,
       after=plain_words)
def test_an_environment_secret_never_survives_anywhere_in_a_report(secret, name, before,
                                                                    after):
    assume(outside_marker(secret))
    environ = {name: secret, "PATH": "/usr/bin"}
    report = {"steps": [{"error": {"message": f"{before}{secret}{after}"}}],
              "environment": [{"name": name, "value": secret, "source": "process"}],
              "process": {"argv": ["server", f"{name}={secret}"]}}
    redacted = redact(report, environment_secrets(environ))
    assert secret not in json.dumps(redacted, ensure_ascii=False)
    assert redacted["environment"][0]["source"] == "process"
    assert redact_environment(environ) == {name: REDACTED, "PATH": "/usr/bin"}


@given(data=st.recursive(st.none() | st.booleans() | st.integers() | plain_words,
                         lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.sampled_from([*PLAIN_NAMES, "name", "value"]),
                                           inner, max_size=4)))
def test_data_without_secrets_is_left_as_it_is(data):
    assert redact(data, ()) == data


@given(secret=secrets, text=plain_words)
def test_text_scrubbing_is_idempotent(secret, text):
    assume(outside_marker(secret))
    once = redact_text(f"{text}{secret}{text}", [secret])
    assert secret not in once
    assert redact_text(once, [secret]) == once


def test_a_url_password_is_redacted():
    assert redact_text("etcd://user:hunter2@10.0.0.1:2379/x") == \
        f"etcd://user:{REDACTED}@10.0.0.1:2379/x"


def test_short_values_are_redacted_by_name_only():
    assert redact_argv(["--api-key", "ab"]) == ["--api-key", REDACTED]
    assert redact_text("a cab", ["ab"]) == "a cab"  # not hunted for in free text


def test_a_flag_without_a_value_hides_no_option():
    assert redact_argv(["--enable-auth", "--port", "30000"]) == \
        ["--enable-auth", "--port", "30000"]
