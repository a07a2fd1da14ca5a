"""The settings schema (blink/settings.py): one declaration per knob, and everything that reads it agrees.

docs/configuration.md's tables are what the schema says; `serve --help` names every variable; a bad variable stops
start-up naming it; spaces.toml and the `BLINK_*` variables take exactly the same values (every bound of every
knob, both ways); the Space refuses a constant no knob owns; the chat defaults the docs state are the engine's.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from blink.errors import StartupError
from blink.settings import Integer, Listen, Number, Settings, SpaceSettings, knobs, resolve_space
from fleet import ConfigError
from fleet.docs import PAGE, with_tables
from fleet.schema import KNOBS_AT, parse_space
from helpers import ROOT, blink_serve, free_port, running

BASE = {"model": "org/alpha-model", "revision": "v2.1", "short_description": "alpha", "description": "The alpha Space."}


def table_with(location: str, value) -> dict:
    table = {k: v for k, v in BASE.items()}
    section, _, key = location.rpartition(".")
    if section:
        table.setdefault(section, {})[key] = value
    else:
        table[key] = value
    return table


def test_docs_tables_match_the_schema():
    page = (ROOT / PAGE).read_text(encoding="utf-8")
    assert with_tables(page, PAGE) == page, f"{PAGE}'s knob tables drifted: run `python build.py --docs`"


def test_serve_help_names_every_flag_and_its_variable():
    done = subprocess.run(
        [sys.executable, "-m", "blink", "serve", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    help_text = " ".join(done.stdout.split())
    for k in knobs(Listen) + knobs(Settings):
        assert k.flag in help_text and f"[{k.env};" in help_text, k.name


def test_a_bad_variable_stops_serve_naming_it():
    done = subprocess.run(
        [sys.executable, "-m", "blink", "serve"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "BLINK_MAX_OUTPUT_TOKENS": "32769"},
    )
    assert done.returncode != 0 and "BLINK_MAX_OUTPUT_TOKENS='32769'" in done.stderr, done.stderr
    assert "1-32768" in done.stderr


BOUNDED = [(loc, k) for loc, k in KNOBS_AT.items() if isinstance(k.parse, (Integer, Number))]


@pytest.mark.parametrize("location,k", BOUNDED, ids=[loc for loc, _ in BOUNDED])
def test_spaces_toml_and_the_variables_agree_on_every_bound(location, k):
    """The same value is accepted (or refused) by spaces.toml and by BLINK_<NAME>, at and past each bound."""
    step = 1 if isinstance(k.parse, Integer) else 0.5
    lo, hi = k.parse.lo, k.parse.hi
    if isinstance(k.parse, Integer):
        lo, hi = int(lo), int(hi)
    for value in (lo, hi, lo - step, hi + step):
        try:
            k.parse(value)
            parse_ok = True
        except ValueError:
            parse_ok = False
        try:
            parse_space("alpha", table_with(location, value))
            fleet_ok = True
        except ConfigError as exc:
            fleet_ok = False
            # a cap below duration_min_s is refused naming duration_min_s
            assert f"[spaces.alpha] {location}:" in str(exc) or "duration_min_s" in str(exc), str(exc)
        try:
            resolve_space({}, env={k.env: str(value)})
            env_ok = True
        except StartupError as exc:
            env_ok = False
            assert k.env in str(exc) or "DURATION_MIN_S" in str(exc), str(exc)
        assert fleet_ok == env_ok, f"{location}={value}: spaces.toml {fleet_ok}, {k.env} {env_ok}"
        if not parse_ok or "duration" not in location:  # a duration bound may also meet another's (min <= max)
            assert fleet_ok == parse_ok, f"{location}={value}"


def test_max_output_tokens_range_is_the_same_everywhere():
    parse_space("alpha", table_with("limits.max_output_tokens", 32768))
    with pytest.raises(ConfigError, match=r"limits.max_output_tokens: must be 1-32768"):
        parse_space("alpha", table_with("limits.max_output_tokens", 32769))
    with pytest.raises(StartupError, match="BLINK_MAX_OUTPUT_TOKENS"):
        resolve_space({}, env={"BLINK_MAX_OUTPUT_TOKENS": "32769"})


@pytest.mark.parametrize(
    "key,value",
    [("vision", True), ("system_prompt", "hi"), ("enable_thinking", True), ("model", "org/x"), ("title", "T")],
)
def test_limits_refuse_keys_that_are_not_limits(key, value):
    with pytest.raises(ConfigError, match=rf"\[spaces.alpha\] limits.{key}: unknown key"):
        parse_space("alpha", table_with(f"limits.{key}", value))


def test_chat_template_takes_only_enable_thinking():
    assert parse_space("alpha", table_with("chat_template.enable_thinking", True)).settings.enable_thinking is True
    with pytest.raises(ConfigError, match=r"chat_template.reasoning_effort: unknown key \(known: enable_thinking\)"):
        parse_space("alpha", table_with("chat_template.reasoning_effort", "low"))
    with pytest.raises(ConfigError, match=r"chat_template.enable_thinking: must be a boolean"):
        parse_space("alpha", table_with("chat_template.enable_thinking", "yes"))


def test_numbers_are_not_coerced_from_toml():
    with pytest.raises(ConfigError, match="limits.max_questions: must be an integer"):
        parse_space("alpha", table_with("limits.max_questions", 1.5))
    with pytest.raises(ConfigError, match="limits.max_questions: must be a number"):
        parse_space("alpha", table_with("limits.max_questions", "12"))
    assert parse_space("alpha", table_with("limits.pass_cost_tokens", "auto")).settings.pass_cost_tokens is None


def test_the_space_refuses_a_constant_no_knob_owns():
    with pytest.raises(StartupError, match="CHAT_TEMPLATE_KWARGS set no knob"):
        resolve_space({"MODEL": "demo", "CHAT_TEMPLATE_KWARGS": {"enable_thinking": True}}, env={})


def test_space_values_are_overridden_by_their_variables_and_checked():
    settings, space = resolve_space(
        {"DURATION_MAX_S": 30, "MAX_QUESTIONS": 9, "TITLE": None},
        env={"BLINK_DURATION_MAX_S": "45", "BLINK_ENABLE_THINKING": "1"},
    )
    assert (space.duration_max_s, settings.max_questions, settings.enable_thinking) == (45, 9, True)
    assert space.title == settings.served_name == "demo"
    assert settings.max_output_tokens == 1024  # the Space's default, not the server's
    assert Settings.from_values({}, env={}).max_output_tokens == 4096
    with pytest.raises(StartupError, match="BLINK_DURATION_MAX_S='0'"):
        resolve_space({}, env={"BLINK_DURATION_MAX_S": "0"})
    with pytest.raises(StartupError, match="DURATION_MIN_S: 9 is above duration_max_s"):
        resolve_space({"DURATION_MIN_S": 9, "DURATION_MAX_S": 5}, env={})


def test_overriding_the_model_drops_the_configured_revision_and_adapter():
    config = {"MODEL": "org/m", "REVISION": "v1", "ADAPTER": "org/lora", "ADAPTER_REVISION": "v2"}
    settings, _ = resolve_space(config, env={"BLINK_MODEL": "demo"})
    assert (settings.model, settings.revision, settings.adapter, settings.adapter_revision) == (
        "demo",
        None,
        None,
        None,
    )
    assert resolve_space(config, env={})[0].revision == "v1"


def test_public_settings_never_show_the_key():
    public = Settings.from_values({"api_key": "sk-never-shown-123"}, env={}).public()
    assert public["api_key_required"] is True and "sk-never-shown-123" not in repr(public)
    assert public["max_questions"] == 1000 and "api_key" not in public


def test_every_space_knob_has_a_fleet_key_and_every_default_parses():
    assert all(k.fleet for k in knobs(SpaceSettings))
    for k in knobs(Settings) + knobs(SpaceSettings) + knobs(Listen):
        if k.default is not None:
            assert k.parse(k.default) == k.default, k.name


@pytest.mark.parametrize("do_sample", [True, False])
def test_chat_sampling_defaults_come_from_generation_config_only_when_it_samples(demo_dir, do_sample):
    """docs/api-openai.md's claim: generation_config.json's temperature/top_p/top_k are the defaults only with
    do_sample = true; a greedy config leaves OpenAI's 1 / 1 / off."""
    from blink.generate.chat_engine import ChatEngine
    from blink.model.loading import load

    loaded = load(str(demo_dir))
    gen = loaded.model.generation_config
    gen.do_sample, gen.temperature, gen.top_p, gen.top_k = do_sample, 0.6, 0.9, 20
    defaults = ChatEngine(loaded).defaults
    expected = (
        {"temperature": 0.6, "top_p": 0.9, "top_k": 20} if do_sample else {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    )
    assert defaults == pytest.approx(expected)


@pytest.mark.parametrize("knob", ["BLINK_GRADIO_UI_NEEDS_KEY", "BLINK_GRADIO_API_NEEDS_KEY"])
def test_a_gradio_knob_that_asks_for_the_key_does_not_start_without_one(knob):
    """Without a key it would guard nothing: the Space must not start looking guarded and stay open."""
    with pytest.raises(StartupError, match=f"{knob} is on but no API key is set"):
        resolve_space({}, env={knob: "1"})
    _, space = resolve_space({}, env={knob: "1", "BLINK_API_KEY": "sk-test-key"})
    assert getattr(space, knob.removeprefix("BLINK_").lower()) is True
    _, space = resolve_space({}, env={})
    assert space.gradio_ui_needs_key is False  # off by default: on ZeroGPU each caller pays their own quota


def test_the_vllm_engine_needs_its_replicas_and_refuses_what_it_cannot_send():
    settings = Settings.from_values({}, env={"BLINK_ENGINE": "vllm", "BLINK_ENGINE_URL": "http://a:8000/, https://b"})
    assert settings.engine_url == ("http://a:8000", "https://b")
    for env, refusal in [
        ({"BLINK_ENGINE": "vllm"}, "ENGINE_URL: engine vllm needs the replicas' URLs"),
        ({"BLINK_ENGINE_URL": "http://a:8000"}, "ENGINE_URL: engine_url is only read with engine vllm"),
        ({"BLINK_ENGINE": "vllm", "BLINK_ENGINE_URL": "a:8000"}, "not an http\\(s\\) base URL: 'a:8000'"),
        ({"BLINK_ENGINE": "vllm", "BLINK_ENGINE_URL": "ftp://a"}, "not an http\\(s\\) base URL"),
        ({"BLINK_ENGINE": "vllm", "BLINK_ENGINE_URL": "http://a,http://a/"}, "a URL is listed twice"),
        ({"BLINK_ENGINE": "sglang"}, "must be one of local, vllm"),
        ({"BLINK_ENGINE": "vllm", "BLINK_ENGINE_URL": "http://a", "BLINK_VISION": "1"}, "VISION: vision needs engine"),
    ]:
        with pytest.raises(StartupError, match=refusal):
            Settings.from_values({}, env=env)
    settings, _ = resolve_space({}, env={"BLINK_ENGINE": "vllm", "BLINK_ENGINE_URL": "http://a"})
    assert settings.engine == "vllm" and settings.engine_url == ("http://a",)  # the Space in front of replicas


def test_serve_refuses_the_vllm_engine_without_replicas():
    done = subprocess.run(
        [sys.executable, "-m", "blink", "serve", "--engine", "vllm"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode != 0 and "--engine-url: engine vllm needs the replicas' URLs" in done.stderr, done.stderr


@pytest.mark.e2e
def test_healthz_is_not_ok_while_every_vllm_replica_is_down(demo_root):
    """A server whose every replica is down says so at the top of /healthz, where load balancers look."""
    import httpx

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with running(blink_serve("--engine", "vllm", "--engine-url", dead), demo_root, name="vllm-down") as url:
        health = httpx.get(url + "/healthz", timeout=30).json()
    assert health["vllm"]["replicas_up"] == 0 and health["vllm"]["replicas"][0]["state"] == "down"
    assert health["ok"] is False
