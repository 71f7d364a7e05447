"""Which stored contexts to compose for a query.

    retriever.py   Retriever over a state store with sentence embeddings (all-MiniLM-L6-v2, the
                   paper's choice); embeddings cached beside the store
    rankers.py     the rankers of the retriever ablation: MiniLM, BM25, random
"""
