"""The policy file's `state:` section and SQUAWK_STATE_URL / SQUAWK_STATE_POD."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from squawk.daemon.config import ConfigError, load_config, parse_config
from squawk.daemon.config.state import StateSettings, Store


def test_the_default_is_the_memory_store() -> None:
    assert parse_config("profiles: {}\n").state == StateSettings()
    assert StateSettings().store is Store.MEMORY


def test_every_field_is_read() -> None:
    state = parse_config(
        """
state:
  store: redis
  url: redis://redis.squawk.svc:6380/2
  key_prefix: "team-a:"
  deadline: 20ms
  min_pods: 3
  sync: 50ms
  fallback_share: 0.25
"""
    ).state
    assert state == StateSettings(
        Store.REDIS,
        "redis://redis.squawk.svc:6380/2",
        "team-a:",
        timedelta(milliseconds=20),
        3,
        sync=timedelta(milliseconds=50),
        fallback_share=0.25,
    )
    assert state.where == "redis://redis.squawk.svc:6380"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "state: {store: postgres}",
            "state.store (line 1): expected memory or redis, got 'postgres'",
        ),
        ("state: {min_pods: x}", "state.min_pods (line 1): expected an integer, got 'x'"),
        ("state: {deadline: 0ms}", "state.deadline (line 1): expected a duration"),
        ("state: {deadline: 2s}", "must be between 1ms and 1s"),
        ("state: {min_pods: 0}", "state.min_pods (line 1): expected an integer"),
        ("state: {min_pods: 1001}", "must be between 1 and 1000"),
        ("state: {sync: 5ms}", "state.sync (line 1): expected a duration such as 100ms: must be"),
        ("state: {sync: 2s}", "must be between 10ms and 1s"),
        ("state: {fallback_share: 0}", "state.fallback_share (line 1): expected a fraction"),
        ("state: {fallback_share: 1.5}", "must be in (0, 1]"),
        ("state: {fallback_share: nan}", "must be in (0, 1]"),
        ("state: {fallback_share: x}", "not a number"),
        ("state: {url: 'http://h:80'}", "not a redis://, rediss:// or unix:// URL"),
        ("state: {url: 'redis://'}", "the URL names no host"),
        ("state: {url: 'redis://h:99999'}", "state.url (line 1): expected a redis:// URL"),
        ("state: {key_prefix: 'a b'}", "state.key_prefix (line 1)"),
        ("state: {url: 'redis://h/0?socket_timeout=x'}", "the only query parameter allowed is db"),
        ("state: {url: 'redis://h/0?password=pw'}", "the only query parameter allowed is db"),
        ("state: {url: 'redis://h/0?db=x'}", "the only query parameter allowed is db"),
        ("state: {url: 'redis://h/0#frag'}", "a URL with a fragment"),
        ("state: {url: 'redis://h/1O'}", "the path is a database number"),
        ("state: {url: 'redis://h/1/2'}", "the path is a database number"),
        ("state: {url: 'redis://h/-1'}", "the path is a database number"),
        ("state: {url: 'redis://h/3?db=5'}", "the database is given twice"),
        ("state: {pod: p1}", "state.pod (line 1): one file serves many pods"),
        ("state: {bogus: 1}", "state.bogus (line 1): unknown field"),
        ("state: [redis]", "state (line 1): expected a mapping"),
    ],
)
def test_a_bad_field_is_named_with_its_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert message in str(caught.value)


def test_a_password_in_the_file_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("state:\n  url: redis://:hunter2pw@redis:6379/0\n")
    text = str(caught.value)
    assert "state.url (line 2)" in text
    assert "SQUAWK_STATE_URL" in text
    assert "hunter2pw" not in text


def test_redis_without_a_url_stops_the_daemon(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("state: {store: redis}\n")
    with pytest.raises(
        ConfigError, match=r"state\.url: required when state\.store \(line 1\) is redis"
    ):
        load_config(str(policy), environ={})
    # The environment can give it (and a password with it, from a Secret).
    url = "redis://:s3cret@10.0.0.5:6379/0"
    state = load_config(str(policy), environ={"SQUAWK_STATE_URL": url}).state
    assert state.url == url
    assert "s3cret" not in state.where


def test_the_environment_turns_the_redis_store_on() -> None:
    env = {"SQUAWK_STATE_URL": "redis://127.0.0.1:6379", "SQUAWK_STATE_POD": "pod-a"}
    state = load_config(None, environ=env).state
    assert state.store is Store.REDIS
    assert state.pod_name() == "pod-a"


@pytest.mark.parametrize(
    "url",
    [
        "http://:pw-x9@h/",
        # An unencoded "/" in the password: urlsplit would take "default:4711"
        # for the host and port, and name it in every log line.
        "redis://default:4711/pw-x9@redis:6379",
        "redis://:pw-x9@h:6379/0?socket_timeout=x",
    ],
)
def test_a_bad_environment_url_stops_the_daemon_without_echoing_it(url: str) -> None:
    # An operator who set it asked for the fleet: a pod quietly alone is worse.
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={"SQUAWK_STATE_URL": url})
    assert str(caught.value).startswith("SQUAWK_STATE_URL: ")
    assert "pw-x9" not in str(caught.value)
    assert "4711" not in str(caught.value)


def test_the_url_may_choose_the_database() -> None:
    state = load_config(None, environ={"SQUAWK_STATE_URL": "redis://h:6379?db=3"}).state
    assert state.url == "redis://h:6379?db=3"


def test_a_bad_pod_name_stops_the_daemon() -> None:
    with pytest.raises(ConfigError, match="SQUAWK_STATE_POD: at most 253 printable"):
        load_config(None, environ={"SQUAWK_STATE_POD": "p" * 254})


def test_daemons_on_one_host_get_distinct_pod_names() -> None:
    # The default carries the pid: two daemons on one machine are two pods.
    assert StateSettings().pod_name().endswith(f"/{os.getpid()}")


def test_a_host_name_with_spaces_still_makes_one_word(monkeypatch: pytest.MonkeyPatch) -> None:
    # The store reads the pod's name as one word of its script's argument.
    monkeypatch.setattr("socket.gethostname", lambda: "a b\tc")
    assert StateSettings().pod_name() == f"a-b-c/{os.getpid()}"


def test_the_tls_files_and_the_sentinels_are_read_from_the_file() -> None:
    state = parse_config(
        """
state:
  store: redis
  tls_ca: /etc/squawk/ca.pem
  tls_cert: /etc/squawk/client.pem
  tls_key: /etc/squawk/client.key
  sentinels: "sentinel-0:26380, sentinel-1, [::1]:26381"
  service_name: squawk-master
"""
    ).state
    assert (state.tls_ca, state.tls_cert, state.tls_key) == (
        "/etc/squawk/ca.pem",
        "/etc/squawk/client.pem",
        "/etc/squawk/client.key",
    )
    assert state.sentinels == (("sentinel-0", 26380), ("sentinel-1", 26379), ("::1", 26381))
    assert state.service_name == "squawk-master"
    assert state.where == (
        "sentinel 'squawk-master' via sentinel-0:26380,sentinel-1:26379,::1:26381"
    )


def test_the_environment_gives_the_tls_files_and_the_sentinels() -> None:
    env = {
        "SQUAWK_STATE_TLS_CA": "/run/ca.pem",
        "SQUAWK_STATE_TLS_CERT": "/run/c.pem",
        "SQUAWK_STATE_TLS_KEY": "/run/c.key",
    }
    state = load_config(None, environ=env).state
    assert (state.tls_ca, state.tls_cert, state.tls_key) == (
        "/run/ca.pem",
        "/run/c.pem",
        "/run/c.key",
    )
    # The sentinels, like a URL, turn the Redis store on.
    env = {"SQUAWK_STATE_SENTINELS": "10.0.0.7:26379", "SQUAWK_STATE_SERVICE_NAME": "m"}
    state = load_config(None, environ=env).state
    assert state.store is Store.REDIS
    assert (state.sentinels, state.service_name, state.url) == ((("10.0.0.7", 26379),), "m", "")


def test_sentinels_without_the_masters_name_stop_the_daemon() -> None:
    with pytest.raises(
        ConfigError, match=r"state\.service_name: required when state\.sentinels is set"
    ):
        load_config(None, environ={"SQUAWK_STATE_SENTINELS": "10.0.0.7:26379"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("state: {sentinels: 'h:0'}", "state.sentinels (line 1): expected host:port pairs"),
        ("state: {sentinels: 'h:x'}", "'h:x' is not a host and a port"),
        ("state: {sentinels: ','}", "'' is not a host and a port"),
        ("state: {sentinels: '" + ",".join(["h:1"] * 17) + "'}", "at most 16 sentinels"),
        ("state: {service_name: 'a b'}", "state.service_name (line 1)"),
        ("state: {tls_ca: ''}", "state.tls_ca (line 1): expected a PEM file's path"),
    ],
)
def test_a_bad_tls_or_sentinel_field_is_named_with_its_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert message in str(caught.value)


def test_a_bad_sentinels_variable_stops_the_daemon() -> None:
    with pytest.raises(ConfigError, match="SQUAWK_STATE_SENTINELS: 'h:99999' is not a host"):
        load_config(None, environ={"SQUAWK_STATE_SENTINELS": "h:99999"})


@pytest.mark.parametrize(
    "value",
    ["sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD", "x" * 100_000, "9" * 100_000 + "h"],
    ids=["a secret", "100,000 characters", "100,000 digits"],
)
def test_a_bad_duration_is_quoted_redacted_and_bounded(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"state: {{deadline: '{value}'}}")
    text = str(caught.value)
    assert text.startswith("state.deadline (line 1): expected a duration")
    assert "abcdefghijklmnop" not in text
    assert len(text) < 300
