"""Fine-tuning a model to use composed states (paper sec. 4): BPTC and BP2C.

    train.py      objectives, data and the accelerate trainer
    evaluate.py   the fine-tuned model against the base: gaps per k, skills, LM loss
    card.py       the model card written from an evaluation report
"""
