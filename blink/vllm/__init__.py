"""blink in front of vLLM replicas (`serve --engine vllm --engine-url URL[,URL...]`).

blink keeps its wires, prompts (the model's own decision template), answers, calibration and admission, and
sends token ids to vLLM: `scoring` reads the label log-probabilities of decisions, `chat` streams generations,
`replicas` routes both by prefix affinity over several replicas with a load-aware fallback and reports their
health. Only the standard library and httpx are imported here: no model is loaded in this process.
"""

from blink.vllm.backend import VllmBackend
from blink.vllm.chat import VllmChat
from blink.vllm.replicas import Replica, Replicas
from blink.vllm.scoring import VllmScorer

__all__ = ["Replica", "Replicas", "VllmBackend", "VllmChat", "VllmScorer"]
