"""Models: loading (hub, local path, packaged GGUF), architectures, Lightning inference and scoring, LoRA
adapters (fine-tuning itself is esgexp/training/)."""
