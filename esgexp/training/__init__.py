"""Fine-tuning: supervised examples (sft_data.py), the Lightning module (lora_module.py) and the trainer
(trainer.py), above strategies and eval (docs/architecture.md)."""
