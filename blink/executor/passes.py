"""Which rows share a forward pass: the executor's cost model (plain Python, no torch).

A pass costs its fixed cost (kernel launches, one read of every weight) plus rows x its longest row (padding
is paid for). The executor asks this twice per call: which groups' prefixes run together, and which prompts'
suffixes run together after a prefix.
"""

from __future__ import annotations


def length_buckets(
    rows: list, lengths: dict, max_rows: int, pass_cost: float = 0.0, max_cells: int | None = None, carried: int = 0
) -> list[list]:
    """Rows (prefixes, or suffixes) grouped into forward passes at the least estimated cost: a pass costs
    `pass_cost` (its fixed cost, in tokens) plus rows x its longest row (padding is paid for). With a small pass cost
    (a CPU) nearly every distinct length gets its own pass; with a large one (a GPU's kernel launches and
    weight reads per pass) lengths share passes and padding.

    Memory: a pass of r rows padded to L holds r x (carried + L) cache cells (`carried`: the prefix every
    suffix row carries in its cache); a pass takes at most `max_rows` rows and at most `max_cells` cells.

    Exact on the runs of equal lengths (sorted longest first): a pass never splits a run except where it is
    full; a group of runs with more rows than a pass holds is cut into full passes, costed (and sized) as if
    each were as long as the group's longest row."""

    def per_pass(length: int) -> int:
        fits = max_rows if max_cells is None else max_cells // (carried + length)
        return max(1, min(max_rows, fits))

    ordered = sorted(rows, key=lambda r: -lengths[r])
    runs: list[list] = []  # rows of equal length, longest first
    for row in ordered:
        if runs and lengths[runs[-1][0]] == lengths[row]:
            runs[-1].append(row)
        else:
            runs.append([row])
    # best[i]: the cheapest cost of the first i runs; cut[i]: where its last group starts
    best, cut = [0.0] + [float("inf")] * len(runs), [0] * (len(runs) + 1)
    for i in range(1, len(runs) + 1):
        count = 0
        for j in range(i - 1, -1, -1):  # the last group is runs[j:i], padded to runs[j]'s length
            count += len(runs[j])
            head = lengths[runs[j][0]]
            cost = best[j] + -(-count // per_pass(head)) * pass_cost + count * head
            if cost < best[i]:
                best[i], cut[i] = cost, j
    groups, i = [], len(runs)
    while i:
        groups.append([row for run in runs[cut[i] : i] for row in run])
        i = cut[i]
    passes = []
    for group in reversed(groups):
        size = per_pass(lengths[group[0]])
        passes += [group[k : k + size] for k in range(0, len(group), size)]
    return passes


# The Gated DeltaNet's reference chunk rule (transformers' PyTorch path, which runs where flash-linear-attention is not
# installed: the CPU) cuts a pass into chunks of 64 tokens by default, padding every row to a multiple of the chunk,
# and solves each chunk's triangular system before a Python loop carries the state from chunk to chunk. Measured on
# this project's CPU benchmark model (bench/RESULTS.md, "The Gated DeltaNet's chunk"), 32-token chunks are faster
# than 64 at every length, prefills of 300-2,200 tokens and question suffixes of 8-200 alike (5-8 %: smaller
# triangular systems, less padding), and 16-token chunks only for rows of at most 16 tokens (more loop steps
# otherwise). The chunk changes the rounding only: the rule is exact for any chunk (~1e-6 in the logits).
def delta_rule_chunk(span: int) -> int:
    """The reference rule's chunk for a pass whose rows are `span` tokens long."""
    return 16 if span <= 16 else 32


def fla_version() -> str | None:
    """flash-linear-attention's version when transformers runs its kernels, None when it falls back to its reference
    PyTorch rules (fla absent, blocked on a machine without CUDA by `blink.model.loading`, or failing to import:
    transformers tries the same import and falls back on any error)."""
    try:
        import fla
    except Exception:  # noqa: BLE001
        return None
    return fla.__version__
