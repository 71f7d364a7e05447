"""The engine: a Mamba-1 / Mamba-2 language model whose context state is a value.

    config.py     ModelConfig, SSMConfig: typed, mamba_ssm's config.json fields
    scan.py       the chunked SSD scan and the selective scan (pure torch; optional kernels)
    state.py      ContextState: per-layer SSM state, conv window, accumulated log-decay
    decode.py     batched recurrent decoding (generate_batch) on the model's O(1) step
    model.py      SSMLanguageModel: forward(ids, state) -> (logits, new state), losses, generate
    tokenizer.py  the byte-level BPE tokenizer (demo) and the GPT-NeoX one (hub checkpoints)
    init.py       mamba_ssm's initialisation, for models trained here
    loading.py    load_model("demo" | folder | hub id), save_model, device checks
    rng.py        seeded(seed): a reproducible model build in a threaded process

The engine imports nothing of picaso_core but `picaso_core.assets` (tests/test_architecture.py
checks it): composition, the store, retrieval, analyses, labs and the UI build on it, never the
other way round.
"""
