"""What more than one test file (or a benchmark) uses, in one place; no test file imports another. Tests import
every name from here (`from helpers import running`); each lives in a module of its own idea:

- helpers/servers.py: servers on loopback: `ROOT`, `ARTIFACTS`, `free_port`, `server_env`, `launch`,
  `wait_healthy`, `start_scripted`, `stop_group`, `running`, `blink_serve`, `ORIGIN` (the one the `surface` server's
  CORS lets in), `SERVERS` (servers stopped after their fixture's last test), and `Served` (a real app on an
  in-process uvicorn);
- helpers/watch.py: `rss`, `Watch` and `watching` (a server's memory and /healthz while a request runs),
  `ServerProcess` (a `blink serve` by its URL: pid, log);
- helpers/bodies.py: request and answer helpers: `random_request`, `body` (the scripted-replica tests' numbered
  request), `probabilities`, `worst`, `assert_close` (two answers within blink's 1e-6), `uncached`, `png`,
  `text_of`, `MB`, `WORDS`;
- helpers/contracts.py: wire contracts: `UNROUTED`, `ROOT_UNROUTED` and `check_unrouted` (unknown paths and
  methods), `run_jevcompat` and `assert_all_pass` (the conformance suite);
- helpers/clients.py: `mcp_call` (one MCP session), `bearer`, `form_args` and `example_form` (the UI's Decide
  event, as the page sends it), `npm_installed` and `node_script` (the JS clients of ci/js, installed from its lock
  when they are not all there), `headless_chromium`;
- helpers/cache_checks.py: `check_resumes_share_and_keep_saved_states` (the prefix cache on and off);
- helpers/space_app.py: the Space under test (`python app.py`): `APP`, `SPACE_ENV`, and its `decide` tool's one
  request (`STATE`, `QUESTIONS`) through /v1/systemone (`systemone`), MCP (`mcp_decide`, `tool_body`) and
  @gradio/client (`js_decide`).

The scripted stand-in network for chat (`ScriptedModel`, its tools and scripts) imports torch, so it lives in
helpers/scripted.py and is imported as `helpers.scripted`; helpers/vllm.py (real vLLM replicas),
helpers/tiny_app.py (blink's Endpoint around handlers that report what reached them, for the wire layer's
in-process tests) and helpers/fleet.py (build.py as the build tests load it: it imports blink) likewise. This
package imports neither torch nor blink.
helpers/browser.py (the Space in headless Chromium at a phone's and a laptop's screen: `SCREENS`, `open_page`,
`open_tab`, `in_view`, `visible_text`, `screenshot_on_failure`) is the browser tests' own and is imported as
`helpers.browser`.
helpers/images.py (the photo questions `QUESTIONS` and `vision_serve`, the vision demo's `blink serve`) is the
image tests' own and is imported as `helpers.images`.
"""

from helpers.bodies import MB, WORDS, assert_close, body, png, probabilities, random_request, text_of, uncached, worst
from helpers.cache_checks import check_resumes_share_and_keep_saved_states
from helpers.clients import (
    CHROMEDRIVER,
    JS,
    bearer,
    example_form,
    form_args,
    headless_chromium,
    mcp_call,
    node_script,
    npm_installed,
    slots,
)
from helpers.contracts import ROOT_UNROUTED, UNROUTED, assert_all_pass, check_unrouted, run_jevcompat
from helpers.servers import (
    ARTIFACTS,
    ORIGIN,
    ROOT,
    SERVERS,
    Served,
    ServersInUse,
    blink_serve,
    free_port,
    launch,
    running,
    server_env,
    start_scripted,
    stop_group,
    wait_healthy,
)
from helpers.space_app import APP, QUESTIONS, SPACE_ENV, STATE, js_decide, mcp_decide, systemone, tool_body
from helpers.watch import ServerProcess, Watch, pid_on_port, rss, watching

__all__ = [
    "ROOT",
    "ARTIFACTS",
    "free_port",
    "server_env",
    "launch",
    "wait_healthy",
    "start_scripted",
    "stop_group",
    "running",
    "ServersInUse",
    "SERVERS",
    "blink_serve",
    "ORIGIN",
    "Served",
    "rss",
    "Watch",
    "pid_on_port",
    "ServerProcess",
    "watching",
    "MB",
    "WORDS",
    "random_request",
    "body",
    "probabilities",
    "worst",
    "assert_close",
    "uncached",
    "text_of",
    "png",
    "UNROUTED",
    "ROOT_UNROUTED",
    "check_unrouted",
    "run_jevcompat",
    "assert_all_pass",
    "mcp_call",
    "JS",
    "npm_installed",
    "CHROMEDRIVER",
    "headless_chromium",
    "node_script",
    "bearer",
    "slots",
    "form_args",
    "example_form",
    "check_resumes_share_and_keep_saved_states",
    "APP",
    "SPACE_ENV",
    "STATE",
    "QUESTIONS",
    "systemone",
    "mcp_decide",
    "tool_body",
    "js_decide",
]
