"""What this Space serves and its limits: the single-Space default configuration.

A plain module of UPPERCASE constants. `build.py` writes one of these per Space from `spaces.toml`, so the
names are an interface: keep them stable. Every knob of `blink/settings.py` (KNOBS) is here under its own
name upper-cased, and the environment variable `BLINK_<NAME>` overrides it at start-up, so a Space's
Variables (or Secrets, for BLINK_API_KEY) tune it without a rebuild. The Space-only values below the knobs
are overridable the same way (`BLINK_TITLE`, `BLINK_GPU_SIZE`, `BLINK_DURATION_MAX_S`, ...).
"""

# --- blink/settings.py KNOBS -------------------------------------------------------------------------------
MODEL = "thegovind/blink-4b"  # local try-out: BLINK_MODEL=demo (the offline random demo model)
REVISION = "v1.0"
ADAPTER = None
ADAPTER_REVISION = None
SERVED_MODEL_NAME = "blink-4b"
MODEL_ALIASES = ()
API_KEY = None  # never here: set the Space secret BLINK_API_KEY
BATCH_WINDOW_MS = 10.0  # requests from the SAME caller arriving within 10 ms share one GPU call
MAX_BATCH_REQUESTS = 16
MAX_QUEUED_REQUESTS = 64
PASS_COST_TOKENS = None  # auto (256 on CUDA): set it from bench/gpu.sh's sweep once a GPU run has measured it
PASS_CACHE_MIB = None  # auto (4096 on CUDA): the attention cache one forward pass may hold
MAX_QUESTIONS = 128
MAX_OPTIONS = 255
MAX_LEVELS = 10
MAX_CONTEXT_TOKENS = 32768
MAX_REQUEST_TOKENS = 65536
MAX_BODY_BYTES = 16 * 1024 * 1024
SYSTEM_PROMPT = None  # chat: prepended when a conversation has no system message
MAX_OUTPUT_TOKENS = 1024  # chat: most tokens per reply (a request's max_tokens is clamped to this)
MAX_CONCURRENT_CHATS = 4  # chat: generations at once; past it HTTP 529 + Retry-After
ENABLE_THINKING = False  # chat: Qwen3.5's <think> block off
VISION = False  # blink-4b reads text only
VISION_TOWER = None  # "repo@revision" of a matching base model's vision tower, to accept images
IMAGE_LAYOUT = "inline"  # image tokens at their placeholders ("inline") or before the state ("first")
MAX_IMAGES = 2
MAX_IMAGE_BYTES = 8 * 1024 * 1024
MAX_IMAGE_PIXELS = 2_088_960
MAX_IMAGE_SOURCE_PIXELS = 20_000_000

# --- what users read ---------------------------------------------------------------------------------------
TITLE = "blink-4b"
DESCRIPTION = ("Typed decisions from one forward pass: ask yes/no, choice and score questions about a text "
               "and get a probability for every option. Also speaks the OpenAI API (chat and decisions).")
CAVEAT = ("blink-4b is a small model: its probabilities are calibrated guesses, not facts. "
          "Check important answers before acting on them.")

# --- chat --------------------------------------------------------------------------------------------------
CHAT_TEMPLATE_KWARGS = {"enable_thinking": False}  # kept in step with ENABLE_THINKING (which wins)
UI_CHAT_MAX_TOKENS = 512  # the Chat tab's turns

# --- ZeroGPU -----------------------------------------------------------------------------------------------
GPU_SIZE = "large"  # "large" (half a GPU, 1x quota) or "xlarge" (a whole GPU, 2x quota)
# the seconds each GPU call requests: estimated from its token counts, clamped to these bounds
DURATION_MIN_S = 2
DURATION_MAX_S = 60  # decisions
CHAT_DURATION_MAX_S = 120  # chat turns
DURATION_COLD_S = 30.0  # added to the first call and after a failed one: a fresh worker moves the weights to
                        # the GPU and compiles its kernels before our function runs
DURATION_OVERHEAD_S = 0.0  # added to every call
DURATION_HEADROOM = 1.3  # times the calibrated compute estimate (an upper envelope already: see blink/durations.py)
# the conservative prior a fresh Space starts from, until its own calls calibrate it (seconds per token)
PREFILL_S_PER_TOKEN = 1e-3
DECODE_S_PER_TOKEN = 0.08

# --- Gradio queue (UI events only; the /v1 routes have their own bounded queue) ----------------------------
QUEUE_MAX_SIZE = 64
QUEUE_CONCURRENCY = 8
