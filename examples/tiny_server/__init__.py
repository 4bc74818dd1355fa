"""tiny-server: a small tensor-parallel LLM server whose whole start-up is an initorch plan.

Modules: ``model`` (the decoder, its safetensors weights, tensor-parallel
loading), ``kv_cache`` (the KV pool), ``steps`` (the start-up steps and the
plugin function), ``serve`` (HTTP on rank 0, lockstep decoding on every rank),
``launch`` (the launcher), ``weights`` (generate the weights file once).
"""
