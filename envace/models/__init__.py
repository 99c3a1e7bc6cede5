"""Policy models: the tiny Qwen3 built by the project, its tokenizer and chat template, loading of any
local HF model dir, and the offline SmolLM2 import. Import submodules directly (they pull in torch and
transformers): `from envace.models.tiny import init_tiny_model`."""
