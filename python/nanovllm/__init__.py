"""nanovllm: nano-vllm's Python API over the C++ engine.

    from nanovllm import LLM, SamplingParams
    llm = LLM("models/qwen3-0.6b")
    outputs = llm.generate(["Hello"], SamplingParams(temperature=0.6, max_tokens=32))
"""
from nanovllm.config import Config
from nanovllm.llm import LLM
from nanovllm.sampling_params import SamplingParams, StructuredOutputsParams
from nanovllm.tokenizer import Tokenizer

__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams", "Config", "Tokenizer"]
__version__ = "0.1.0"
