"""redact.py: credentials out of what is stored and printed, on the inputs that are easy to get wrong."""
from __future__ import annotations

import base64

import pytest

from insandbox.config import ConfigError, RunConfig, refuse_redacted, restored
from insandbox.core.redact import MARK, fits, is_redacted, is_secret_name, redact, redact_url, secrets_in


@pytest.mark.parametrize("url, shown", [
    ("http://user:KEY@host/v1", "http://user:***@host/v1"),
    ("https://TOKEN@api.example.com/v1", "https://***@api.example.com/v1"),  # a user alone is often the token
    ("http://user:@host:8000/v1", "http://user:***@host:8000/v1"),
    ("http://u:p%40ss%3Aw@10.0.0.1:8000/v1", "http://u:***@10.0.0.1:8000/v1"),  # percent-encoded @ and :
    ("http://u:p@ss@host/v1", "http://u:***@host/v1"),  # an unencoded @: the userinfo ends at the last one
    ("http://user:pw@[::1]:8000/v1", "http://user:***@[::1]:8000/v1"),
    ("http://[fe80::1%25eth0]:8000/v1", "http://[fe80::1%25eth0]:8000/v1"),  # IPv6, no userinfo
    ("http://[::1]/v1", "http://[::1]/v1"),
    ("http://localhost:8000/v1", "http://localhost:8000/v1"),
    ("http://host/v1?api-version=2024-06-01&api-key=K&Sig=S#frag",
     "http://host/v1?api-version=2024-06-01&api-key=***&Sig=***#frag"),
    ("http://host/v1?access_token=&model=x", "http://host/v1?access_token=&model=x"),  # empty: nothing to hide
    ("http://host/v1?X-Amz-Credential=C&X-Amz-Security-Token=T&max_tokens=9",
     "http://host/v1?X-Amz-Credential=***&X-Amz-Security-Token=***&max_tokens=9"),
    ("http://host/a@b/v1", "http://host/a@b/v1"),  # an @ in the path is no userinfo
    ("http://host/v1?email=a@b.c", "http://host/v1?email=a@b.c"),
    ("user:pw@host:8000/v1", "user:pw@host:8000/v1"),  # no scheme: not a URL, as for the SDK
    ("embedded", "embedded"),
    ("", ""),
])
def test_url_credentials_are_masked_and_the_server_stays_readable(url, shown):
    assert redact_url(url) == shown
    assert redact(url) == shown
    assert redact(shown) == shown  # redacting twice changes nothing


def test_urls_inside_text_are_masked_and_the_text_around_them_kept():
    text = "cannot reach the model server at http://me:hunter2@127.0.0.1:9/v1: [Errno 111] (see 'https://T@x/y')"
    assert redact(text) == ("cannot reach the model server at http://me:***@127.0.0.1:9/v1: [Errno 111] "
                            "(see 'https://***@x/y')")
    assert redact("no URL here, user:pw@host either") == "no URL here, user:pw@host either"


@pytest.mark.parametrize("name", ["api_key", "key", "token", "Authorization", "x-api-key", "X-API-Key", "apiKey",
                                  "APIKey", "access_token", "accessToken", "client_secret", "password", "PASSWD",
                                  "sig", "signature", "Ocp-Apim-Subscription-Key", "aws.secret", "hf_token",
                                  "credentials", "Cookie"])
def test_secret_looking_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["max_tokens", "top_k", "topK", "temperature_x", "keys", "tokens", "model",
                                  "prompt_cache_key", "eos_token", "stop", "keyword", "token_budget",
                                  "chat_template_kwargs", "", "secretary"])
def test_names_that_are_no_secret(name):
    assert not is_secret_name(name)


def test_extra_body_values_under_secret_keys_are_masked_at_any_depth_and_the_rest_kept():
    body = {"api_key": "SECRET2", "nested": {"token": "SECRET3", "eos_token": "</s>", "deeper": [{"Password": 7}]},
            "temperature_x": 1, "use_auth_token": True, "auth": None, "headers": {"Authorization": "Bearer X"},
            "chat_template_kwargs": {"enable_thinking": False}, "callback": "https://u:p@hook.example/x",
            "secret": {"user": "a", "pass": "b"}}
    assert redact(body) == {
        "api_key": MARK, "nested": {"token": MARK, "eos_token": "</s>", "deeper": [{"Password": MARK}]},
        "temperature_x": 1, "use_auth_token": True, "auth": None, "headers": {"Authorization": MARK},
        "chat_template_kwargs": {"enable_thinking": False}, "callback": "https://u:***@hook.example/x",
        "secret": MARK}
    assert body["api_key"] == "SECRET2"  # a copy: what is sent stays whole


def test_known_secrets_are_masked_wherever_they_appear_and_short_ones_only_alone():
    key = "sk-live-0123456789"
    assert redact({"upstream": key, "note": f"Bearer {key}"}, {key}) == {"upstream": MARK, "note": f"Bearer {MARK}"}
    assert redact({"a": "abc", "b": "abcdef"}, {"abc"}) == {"a": MARK, "b": "abcdef"}
    assert redact("server said: bad key sk-live-0123456789 for you", [key]) == "server said: bad key *** for you"
    assert redact(None, [key]) is None and redact(3, [key]) == 3


def test_secrets_in_finds_every_form_a_credential_may_take_in_text():
    found = secrets_in("http://user:p%40ss@h:1/v1?token=t%2Bk", {"api_key": "S2", "n": {"token": 33},
                                                                "cb": "https://TOK@x/"}, "sk-key")
    basic = base64.b64encode(b"user:p@ss").decode()
    assert {"p%40ss", "p@ss", basic, "t%2Bk", "t+k", "S2", "33", "TOK", "sk-key"} <= found
    assert "user" not in found and "h" not in found
    assert secrets_in(None, None) == set() and secrets_in("http://h/v1", {"top_k": 2}) == set()


def test_run_config_records_redacted_settings_and_keeps_the_real_ones():
    cfg = RunConfig(model="m", base_url="http://user:PW-123456@127.0.0.1:8/v1", api_key="sk-0123456789",
                    extra_body={"api_key": "S2", "route": "sk-0123456789", "n": {"token": "S3"}, "top_k": 5})
    public = cfg.public()
    assert public["base_url"] == "http://user:***@127.0.0.1:8/v1" and public["api_key_set"] is True
    assert public["extra_body"] == {"api_key": MARK, "route": MARK, "n": {"token": MARK}, "top_k": 5}
    assert "api_key" not in public and "sk-0123456789" not in str(public) and "PW-123456" not in str(public)
    assert cfg.base_url.startswith("http://user:PW-123456@") and cfg.extra_body["api_key"] == "S2"
    plain = RunConfig(model="m", base_url="http://127.0.0.1:8/v1", extra_body={"top_k": 5})
    assert plain.public()["base_url"] == "http://127.0.0.1:8/v1" and plain.public()["extra_body"] == {"top_k": 5}


def test_a_redacted_recording_asks_for_the_value_again_and_takes_only_one_that_fits():
    url, body = "http://user:***@h:1/v1", {"api_key": MARK, "top_k": 5}
    assert is_redacted(url) and is_redacted(body) and not is_redacted({"top_k": 5}) and not is_redacted(None)
    assert fits(url, "http://user:PW@h:1/v1") and not fits(url, "http://user:PW@other:1/v1")
    assert fits(body, {"api_key": "S2", "top_k": 5}) and not fits(body, {"api_key": "S2", "top_k": 6})
    assert not fits(body, {"top_k": 5})
    assert restored(url, "http://user:PW@h:1/v1", "--base-url") == "http://user:PW@h:1/v1"
    assert restored("http://h/v1", None, "--base-url") == "http://h/v1"
    with pytest.raises(ConfigError, match=r"recorded --base-url held a credential.*give it again with --base-url"):
        restored(url, None, "--base-url")
    with pytest.raises(ConfigError, match=r"--extra-body .* is not the recorded"):
        restored(body, {"api_key": "S2", "top_k": 6}, "--extra-body")
    with pytest.raises(ConfigError, match="--extra-body") as e:
        refuse_redacted({"base_url": "http://h/v1", "extra_body": body}, {"base_url": "--base-url",
                                                                           "extra_body": "--extra-body"})
    assert "\n" not in str(e.value)
