"""The Space's own modules: the UI, the Gradio `decide` tool, the ZeroGPU glue and its GPU durations."""
