"""Architecture numbers of the models the design card sizes, for a memory plan without weights or a download.

Each entry is transcribed from the model's ``config.json`` on the Hugging Face hub and keeps its field
names, so ``esgexp.memory.plan.Shape.from_config`` reads a table entry and a cached config.json alike. Keyed by
``model.name`` (conf/model/*.yaml); a cached config.json of the model wins over this table.
"""

from __future__ import annotations

# meta-llama/Llama-3.1-8B and -Instruct (8.03 B parameters; DeepSeek-R1-Distill-Llama-8B shares the shape).
LLAMA_3_1_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}
# meta-llama/Llama-3.2-1B and -Instruct (1.24 B parameters).
LLAMA_3_2_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 8192,
    "vocab_size": 128256,
    "tie_word_embeddings": True,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}
# Qwen/Qwen2.5-14B-Instruct (14.7 B parameters; q, k and v projections carry biases).
QWEN2_5_14B_INSTRUCT = {
    "model_type": "qwen2",
    "hidden_size": 5120,
    "num_hidden_layers": 48,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 13824,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}
# HuggingFaceTB/SmolLM2-135M-Instruct (the bundled default, 135 M parameters).
SMOLLM2_135M = {
    "model_type": "llama",
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}

ARCHITECTURES = {
    "llama-3.1-8b": LLAMA_3_1_8B,
    "llama-3.1-8b-instruct": LLAMA_3_1_8B,
    "deepseek-r1-distill-llama-8b": LLAMA_3_1_8B,
    "llama-3.2-1b": LLAMA_3_2_1B,
    "llama-3.2-1b-instruct": LLAMA_3_2_1B,
    "qwen2.5-14b-instruct": QWEN2_5_14B_INSTRUCT,
    "smollm2-135m": SMOLLM2_135M,
}
