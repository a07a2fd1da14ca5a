"""The Space's own modules: the UI (a module per tab and view: Decide, Rank, Moderate, the Sheet and its run, Chat,
API), the Gradio `decide` tool, the ZeroGPU glue and its GPU durations."""
