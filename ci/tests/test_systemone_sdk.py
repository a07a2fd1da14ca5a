"""TypeSafe's own Python SDK, unchanged, against `python -m blink serve --model demo`."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from typesafe_sdk import (
    Choice,
    Noul,
    Score,
    TypeSafeAuthenticationError,
    TypeSafeClient,
    TypeSafeUnprocessableEntityError,
)

pytestmark = pytest.mark.e2e


@pytest.fixture()
def client(server, monkeypatch):
    monkeypatch.setenv("TYPESAFE_BASE_URL", server)
    monkeypatch.setenv("TYPESAFE_API_KEY", "any-key-is-fine-when-auth-is-off")
    with TypeSafeClient() as c:
        yield c


def test_sdk_parses_all_three_types(client):
    long_state = {"message": "I was charged twice for order 4471. " * 60}  # > 1 KB: the SDK sends it zstd
    r = client.system_one(
        state=long_state,
        questions={
            "refund": Noul(instructions="Is the customer asking for money back?"),
            "team": Choice(instructions="Which team?", criteria={"billing": None, "technical": "Bugs", "销售": None}),
            "anger": Score(instructions="How frustrated?", criteria=["Calm", "Frustrated", "Very angry"]),
        },
    )
    assert r.model == "demo"
    assert 0 <= r.nouls["refund"].noul <= 1
    team = r.choices["team"]
    assert set(team.probabilities) == {"billing", "technical", "销售"}
    assert team.choice == max(team.probabilities, key=team.probabilities.get)
    assert abs(sum(team.probabilities.values()) - 1) < 1e-6
    anger = r.scores["anger"]
    assert set(anger.legend) == {0, 1, 2} and anger.legend[2] == "Very angry"
    assert abs(anger.score - sum(i * p for i, p in anger.probabilities.items())) < 1e-9
    assert re.fullmatch(r"req_[0-9a-f]{32}", r.request_id)
    assert r.usage.input_tokens > 100 and r.usage.output_tokens == 0


def test_sdk_models_list(client):
    names = [m.name for m in client.models.list().models]
    assert names[0] == "demo"


def test_sdk_validation_error_names_the_question(client):
    with pytest.raises(TypeSafeUnprocessableEntityError) as info:
        client.system_one(
            state="hi",
            questions={
                "good": Noul(instructions="ok?"),
                "bad-one": Choice(criteria={f"o{i}": None for i in range(300)}),
            },
        )
    assert "bad-one" in str(info.value)
    body = info.value.body
    assert body["detail"][0]["loc"] == ["body", "questions", "bad-one"]
    assert re.fullmatch(r"req_[0-9a-f]{32}", info.value.request_id)


def test_sdk_wrong_key_is_an_authentication_error(keyed_server, monkeypatch):
    monkeypatch.setenv("TYPESAFE_BASE_URL", keyed_server)
    with TypeSafeClient(api_key="wrong-key") as c, pytest.raises(TypeSafeAuthenticationError):
        c.system_one(state="hi", questions={"q": Noul(instructions="ok?")})
    with TypeSafeClient(api_key="sekret-key-123") as c:
        assert 0 <= c.system_one(state="hi", questions={"q": Noul(instructions="ok?")}).nouls["q"].noul <= 1


def test_auth_rules(keyed_server):
    q = {"state": "hi", "questions": {"q": {"type": "noul"}}}
    missing = httpx.post(keyed_server + "/v1/systemone", json=q)
    assert missing.status_code == 401
    assert missing.json()["detail"]["error_type"] == "authentication_error"
    assert "sekret" not in missing.text
    assert httpx.get(keyed_server + "/v1/models").status_code == 401
    health = httpx.get(keyed_server + "/healthz")  # stays open
    assert health.status_code == 200 and health.json()["api_key_required"] is True
    assert "sekret" not in health.text


def test_unicode_option_names_round_trip_byte_for_byte(server):
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    options = {nfc: None, nfd: None, "Ünïcødé 🎯": None, "질문": "Korean"}
    r = httpx.post(
        server + "/v1/systemone", json={"state": "x", "questions": {"🎯": {"type": "choice", "criteria": options}}}
    )
    assert r.status_code == 200
    got = json.loads(r.content.decode("utf-8"))["answers"]["🎯"]["probabilities"]
    assert list(got) == list(options)


def test_model_name_is_accepted_and_the_served_model_named(server):
    for name in ("jev-latest", "jev-preview", "anything-at-all"):
        r = httpx.post(
            server + "/v1/systemone", json={"model": name, "state": "x", "questions": {"q": {"type": "noul"}}}
        )
        assert r.status_code == 200 and r.json()["model"] == "demo"


def test_models_body_serves_both_families(server):
    body = httpx.get(server + "/v1/models").json()
    assert body["object"] == "list" and body["data"][0]["id"] == "demo"
    assert all(isinstance(m[k], str) for m in body["models"] for k in ("name", "description", "release_date"))
    assert body["limits"]["max_questions"] == 1000 and body["limits"]["max_levels"] == 255  # the defaults


def test_healthz_fields(server):
    h = httpx.get(server + "/healthz").json()
    for key in (
        "ok",
        "model",
        "revision",
        "weights_verified",
        "hub_offline",
        "warmup",
        "kernels",
        "versions",
        "batching",
        "api_key_required",
        "accepts_images",
    ):
        assert key in h, key
    assert h["ok"] is True and h["hub_offline"] is True and h["warmup"]["repeat_identical"] is True
